package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

var tableHeader = []string{"nodes", "workload", "contender", "ops/s", "×redsync", "×floor", "×rueidislock", "acquire p50", "acquire p99", "release p50", "allocs/op", "CPU/op client+servers", "notes"}

// tableRows renders the cells as text, one row per cell, in the order of
// Results.Cells.
func (r *Results) tableRows() [][]string {
	rows := make([][]string, 0, len(r.Cells))
	for _, c := range r.Cells {
		var notes []string
		if c.VsNoFault != 0 {
			notes = append(notes, fmt.Sprintf("p50 %.2f× no-fault", c.VsNoFault))
		}
		if c.VsNoIdle != 0 {
			notes = append(notes, fmt.Sprintf("ops/s %.2f×, server CPU/op %.2f× no idle client", c.VsNoIdle, c.ServerCPUVsNoIdle))
		}
		if c.HandoffP50 != 0 {
			notes = append(notes, fmt.Sprintf("hand-off p50 %s = %.1f RTT", formatDuration(c.HandoffP50), c.HandoffRTTs))
		}
		if c.Failures != 0 {
			notes = append(notes, count(c.Failures, "failure"))
		}
		if c.Violations != 0 {
			notes = append(notes, strings.ToUpper(count(c.Violations, "violation")))
		}
		rows = append(rows, []string{
			fmt.Sprint(c.Nodes), c.Workload, c.Contender,
			fmt.Sprintf("%.0f", c.OpsPerSec),
			formatRatio(c.VsRedsync), formatRatio(c.VsFloor), formatRatio(c.VsRueidislock),
			formatDuration(c.AcquireP50), formatDuration(c.AcquireP99), formatDuration(c.ReleaseP50),
			fmt.Sprintf("%.0f", c.AllocsPerOp),
			formatCPU(c.ClientCPU, c.ServerCPU),
			strings.Join(notes, "; "),
		})
	}
	return rows
}

func (r *Results) caption() string {
	m := r.Machine
	server := m.RedisVersion
	if server != "" && server[0] >= '0' && server[0] <= '9' {
		server = "redis " + server // written before the field named the server
	}
	return fmt.Sprintf("Medians of %d interleaved runs of %v per cell; ×redsync, ×floor and ×rueidislock are ops/s against redsync (default options), the raw floor and rueidislock in the same cell.\n"+
		"Machine: %d CPUs (%s), %s %s/%s, %s, load average %s at start, %s at end.",
		r.Config.Repeats, r.Config.Duration, m.CPUs, m.CPUModel, m.GoVersion, m.OS, m.Arch, server, m.LoadBefore, m.LoadAfter)
}

// WriteTable prints the medians as an aligned text table with a caption
// saying how and where they were measured.
func (r *Results) WriteTable(w io.Writer) error {
	if _, err := fmt.Fprintln(w, r.caption()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// A held-locks-only run has no throughput cells: no empty table then.
	if len(r.Cells) > 0 {
		fmt.Fprintln(tw, strings.Join(tableHeader, "\t"))
	}
	for _, row := range r.tableRows() {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.HeldCells) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\n"+r.heldCaption())
	fmt.Fprintln(tw, strings.Join(heldHeader, "\t"))
	for _, row := range r.heldRows() {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

var heldHeader = []string{"nodes", "locks held", "take all", "client CPU/s", "servers CPU/s", "extends/s", "extend failures", "lost", "goroutines", "heap in use", "notes"}

func (r *Results) heldCaption() string {
	renew := "WithAutoExtend"
	if r.Config.HeldLean {
		renew = "WithLeanRenewal"
	}
	return fmt.Sprintf("%s: one client holds the locks (TTL %v, %s, Done watched), taken %d at a time; CPU is seconds per second over %v of holding (1.00 = one core). Medians of the repeats; lost and failures summed.",
		WorkloadHeldLocks, HeldTTL, renew, heldBatch, r.Config.HeldFor)
}

func (r *Results) heldRows() [][]string {
	rows := make([][]string, 0, len(r.HeldCells))
	for _, c := range r.HeldCells {
		var notes []string
		if c.Failures != 0 {
			notes = append(notes, count(c.Failures, "failure"))
		}
		if c.Lost != 0 {
			notes = append(notes, "LOCKS LOST")
		}
		rows = append(rows, []string{
			fmt.Sprint(c.Nodes), fmt.Sprint(c.Locks), formatDuration(c.AcquireAll),
			fmt.Sprintf("%.3f", c.ClientCPU), fmt.Sprintf("%.3f", c.ServerCPU),
			fmt.Sprintf("%.0f", c.ExtendsPerSec), fmt.Sprint(c.ExtendFailures), fmt.Sprint(c.Lost),
			fmt.Sprint(c.Goroutines), fmt.Sprintf("%.0f MiB", float64(c.HeapInUse)/(1<<20)),
			strings.Join(notes, "; "),
		})
	}
	return rows
}

// WriteMarkdown prints the same table as Markdown, for a README.
func (r *Results) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString(r.caption() + "\n\n")
	if len(r.Cells) > 0 {
		b.WriteString("| " + strings.Join(tableHeader, " | ") + " |\n")
		b.WriteString("|" + strings.Repeat("---|", len(tableHeader)) + "\n")
	}
	for _, row := range r.tableRows() {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	if len(r.HeldCells) > 0 {
		b.WriteString("\n" + r.heldCaption() + "\n\n")
		b.WriteString("| " + strings.Join(heldHeader, " | ") + " |\n")
		b.WriteString("|" + strings.Repeat("---|", len(heldHeader)) + "\n")
		for _, row := range r.heldRows() {
			b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes every run and every cell, indented.
func (r *Results) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// formatCPU shows the CPU an operation cost the client and the servers, in
// µs; "—" for results written before these were measured.
func formatCPU(client, servers time.Duration) string {
	if client == 0 && servers == 0 {
		return "—"
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return fmt.Sprintf("%.0f+%.0fµs", us(client), us(servers))
}

func count(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func formatRatio(x float64) string {
	if x == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", x)
}

// formatDuration rounds to three significant figures so columns stay short.
func formatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}
