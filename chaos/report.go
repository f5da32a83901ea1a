package chaos

import (
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func sortBy[T any](xs []T, key func(T) string) {
	slices.SortStableFunc(xs, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
}

// Outcome is "ok" when a run met its expectation, else "MISMATCH".
func (r *Run) Outcome() string {
	if r.Mismatch != nil {
		return "MISMATCH"
	}
	return "ok"
}

func fmtMS(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// Table is the report as a Markdown table, one row per scenario and
// backend: what was expected, what the checker found, and the figures.
func (r *Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | backend | expected | outcome | acquisitions | a | b | c | e | f | stale writes rejected | lost updates | acquire p50 | acquire p99 | recovery | ran |\n")
	fmt.Fprintf(&b, "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, run := range r.Runs {
		res := run.Result
		c := res.Counts
		lost := "?"
		if res.LostUpdates >= 0 {
			lost = fmt.Sprint(res.LostUpdates)
		}
		rec := "-"
		if res.RecoveryMeasured {
			rec = fmtMS(res.Recovery)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s |\n",
			run.Scenario.Name, run.Backend, run.Scenario.Expect.Verdict, run.Outcome(), res.Acquisitions,
			c[CheckMutualExclusion], c[CheckTokenOrder], c[CheckFenceOrder], c[CheckLeftoverKey], c[CheckLiveness],
			res.StaleRejected, lost, fmtMS(res.AcquireP50), fmtMS(res.AcquireP99), rec, run.Elapsed.Round(time.Second))
	}
	for _, f := range r.Failed {
		fmt.Fprintf(&b, "| %s | %s | | COULD NOT RUN: %s | | | | | | | | | | | | |\n", f.Scenario, f.Backend, strings.ReplaceAll(f.Err.Error(), "|", "/"))
	}
	b.WriteString("\nChecks: a mutual exclusion, b token order, c fence order, e leftover keys, f liveness (numbers are violations; lost updates are of the unfenced register).\n")
	return b.String()
}

// WriteFiles writes report.md, report.html and, for each run, its history
// as JSON lines (history-<scenario>-<backend>.jsonl) into dir.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	md := fmt.Sprintf("# Chaos soak\n\nStarted %s, %s per scenario, %s in all.\n\n%s",
		r.Started.Format(time.RFC3339), r.Duration, r.Elapsed.Round(time.Second), r.Table())
	for _, run := range r.Runs {
		if run.Mismatch != nil {
			md += fmt.Sprintf("\n- %s on %s: %v\n", run.Scenario.Name, run.Backend, run.Mismatch)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return err
	}
	if err := r.WriteHTML(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	for _, run := range r.Runs {
		name := fmt.Sprintf("history-%s-%s.jsonl", run.Scenario.Name, run.Backend)
		if err := writeHistory(filepath.Join(dir, name), run.History); err != nil {
			return err
		}
	}
	return nil
}

func writeHistory(path string, h History) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, e := range h {
		if err := enc.Encode(e); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// ---- HTML ----

// WriteHTML writes a self-contained page: the summary table, then per run
// its figures, its violations and SVG timelines (the whole run, and a
// close-up of the first violation or fault).
func (r *Report) WriteHTML(w io.Writer) error {
	type runView struct {
		*Run
		Anchor     string
		Summary    string
		Violations []Violation
		Full, Zoom template.HTML
		ZoomNote   string
		Steps      []string
	}
	var views []runView
	for _, run := range r.Runs {
		v := runView{Run: run, Anchor: run.Scenario.Name + "-" + run.Backend, Summary: Summarize(run.Result)}
		v.Violations = run.Result.Violations
		if len(v.Violations) > 10 {
			v.Violations = v.Violations[:10]
		}
		for _, st := range run.Scenario.Schedule {
			v.Steps = append(v.Steps, st.String())
		}
		v.Full = timeline(run.Result, 0, run.Result.End, 1100)
		from, to, note := zoomWindow(run)
		v.ZoomNote = note
		if note != "" {
			v.Zoom = timeline(run.Result, from, to, 1100)
		}
		views = append(views, v)
	}
	return reportPage.Execute(w, map[string]any{"R": r, "Runs": views, "Checks": AllChecks})
}

// zoomWindow picks the close-up: the events that show the first
// violation, else the first fault, with some time around them.
func zoomWindow(run *Run) (from, to time.Duration, note string) {
	res := run.Result
	pad := min(run.Scenario.ttl()/2, 500*time.Millisecond)
	switch {
	case len(res.Violations) > 0:
		v := res.Violations[0]
		from, to = v.At, v.At
		for _, e := range v.Excerpt {
			from, to = min(from, e.At), max(to, e.At)
		}
		note = fmt.Sprintf("close-up of the first violation (%s at %.3fs)", v.Check, v.At.Seconds())
	case len(res.Faults) > 0:
		f := res.Faults[0]
		from, to, note = f.Apply, max(f.Heal, f.Apply), "close-up of the first fault"
	default:
		return 0, 0, ""
	}
	from, to = from-pad, to+pad
	if to-from < 2*time.Second {
		mid := (from + to) / 2
		from, to = mid-time.Second, mid+time.Second
	}
	return max(from, 0), min(to, res.End), note
}

// timeline draws [from, to) of a run: a lane per client with its holds
// (validity as a thin bar, the time it acted as holder as a block; red
// when it overlapped another client's hold, with the part acted after its
// validity hatched), fault windows as bands, violations as red lines, and
// a token lane showing each token's rank.
func timeline(res Result, from, to time.Duration, width int) template.HTML {
	if to <= from {
		return ""
	}
	clients := 0
	for _, h := range res.Holds {
		clients = max(clients, h.Client+1)
	}
	const left, laneH, top = 70, 34, 42
	tokenH := 90
	chartW := width - left - 10
	height := top + clients*laneH + 20 + tokenH + 30
	x := func(t time.Duration) float64 {
		return left + float64(t-from)/float64(to-from)*float64(chartW)
	}
	clip := func(t time.Duration) time.Duration { return min(max(t, from), to) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, width, height)
	b.WriteString(`<defs><pattern id="late" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" height="6" fill="#c62828"/></pattern></defs>`)
	// fault bands
	for i, f := range res.Faults {
		if f.Heal < from || f.Apply > to {
			continue
		}
		x0, x1 := x(clip(f.Apply)), x(clip(f.Heal))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#ffb74d" opacity="0.25"><title>%s: %.3fs - %.3fs</title></rect>`,
			x0, top-16, max(x1-x0, 1), clients*laneH+16, template.HTMLEscapeString(f.Fault), f.Apply.Seconds(), f.Heal.Seconds())
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#e65100">%s</text>`, x0+2, top-18-(i%2)*12, template.HTMLEscapeString(f.Fault))
	}
	// lanes
	for c := range clients {
		y := top + c*laneH
		fmt.Fprintf(&b, `<text x="4" y="%d">client %d</text>`, y+laneH/2+4, c)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#ddd"/>`, left, left+chartW, y+laneH-2, y+laneH-2)
	}
	palette := []string{"#1e88e5", "#43a047", "#8e24aa", "#00897b", "#6d4c41", "#3949ab"}
	// Holds less than a pixel apart that overlapped no one are drawn as one
	// block: a soak has thousands, and a page of them would not open.
	type block struct {
		x0, x1 float64
		n      int
	}
	merged := make([]*block, clients)
	flush := func(c int) {
		m := merged[c]
		if m == nil {
			return
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%d holds of client %d</title></rect>`,
			m.x0, top+c*laneH+4, max(m.x1-m.x0, 1), laneH-14, palette[c%len(palette)], m.n, c)
		merged[c] = nil
	}
	for _, h := range res.Holds {
		if h.End < from || h.Start > to {
			continue
		}
		x0, x1 := x(clip(h.Start)), x(clip(h.End))
		if !h.Conflict && !h.Stalled {
			if m := merged[h.Client]; m != nil && x0-m.x1 < 1 {
				m.x1, m.n = max(m.x1, x1), m.n+1
				continue
			}
			flush(h.Client)
			merged[h.Client] = &block{x0, x1, 1}
			if x1-x0 < 1 {
				continue // a lone sliver: drawn as a block, no validity bar
			}
		}
		y := top + h.Client*laneH
		col := palette[h.Client%len(palette)]
		if h.Conflict {
			col = "#c62828"
		}
		title := fmt.Sprintf("client %d hold %d token %d: acquired %.3fs, valid until %.3fs, acted until %.3fs", h.Client, h.Hold, h.Token, h.Start.Seconds(), h.ValidUntil.Seconds(), h.End.Seconds())
		// validity: thin bar
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="3" fill="%s" opacity="0.5"><title>%s</title></rect>`,
			x0, y+laneH-8, max(x(clip(h.ValidUntil))-x0, 0.5), col, template.HTMLEscapeString(title))
		if !h.Conflict && !h.Stalled {
			continue // its block is drawn by flush
		}
		// acting as holder: block, hatched after the validity
		actEnd := h.End
		if h.Stalled {
			actEnd = min(h.End, h.ValidUntil)
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`,
			x0, y+4, max(x(clip(actEnd))-x0, 1), laneH-14, col, template.HTMLEscapeString(title))
		if h.Stalled && h.End > h.ValidUntil {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="url(#late)" stroke="#c62828"><title>acted after its validity: %s</title></rect>`,
				x(clip(h.ValidUntil)), y+4, max(x1-x(clip(h.ValidUntil)), 1), laneH-14, template.HTMLEscapeString(title))
		}
	}
	for c := range clients {
		flush(c)
	}
	// violations
	for _, v := range res.Violations {
		if v.At < from || v.At > to {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#d50000" stroke-width="2"><title>%s</title></line>`,
			x(v.At), x(v.At), top-14, top+clients*laneH, template.HTMLEscapeString(string(v.Check)+": "+v.Detail))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#d50000" font-weight="bold">%s</text>`, x(v.At)+2, top+clients*laneH+12, template.HTMLEscapeString(string(v.Check)[:1]))
	}
	// token lane: each acquisition's token as its rank among all tokens,
	// so an out-of-order token shows as a drop.
	ty := top + clients*laneH + 20
	fmt.Fprintf(&b, `<text x="4" y="%d">tokens</text>`, ty+tokenH/2)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ddd"/>`, left, ty, chartW, tokenH)
	var tokens []int64
	for _, h := range res.Holds {
		if h.Token != 0 {
			tokens = append(tokens, h.Token)
		}
	}
	slices.Sort(tokens)
	tokens = slices.Compact(tokens)
	var best int64
	lastCol := -1
	for _, h := range res.Holds {
		if h.Token == 0 {
			continue
		}
		backwards := h.Token <= best
		best = max(best, h.Token)
		if h.Start < from || h.Start > to {
			continue
		}
		if col := int(x(h.Start)); col == lastCol && !backwards {
			continue // one dot a pixel column is enough, unless it is out of order
		} else {
			lastCol = col
		}
		rank, _ := slices.BinarySearch(tokens, h.Token)
		yy := float64(ty+tokenH-4) - float64(rank)/float64(max(len(tokens)-1, 1))*float64(tokenH-8)
		col, rad := palette[h.Client%len(palette)], 2.5
		if backwards {
			col, rad = "#d50000", 5
		}
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"><title>client %d token %d at %.3fs%s</title></circle>`,
			x(h.Start), yy, rad, col, h.Client, h.Token, h.Start.Seconds(), map[bool]string{true: " (not above an earlier token)", false: ""}[backwards])
	}
	// time axis
	ay := ty + tokenH + 16
	step := niceStep(to - from)
	for t := from - from%step; t <= to; t += step {
		if t < from {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999"/><text x="%.1f" y="%d" text-anchor="middle">%gs</text>`,
			x(t), x(t), ay-6, ay-2, x(t), ay+10, t.Seconds())
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// niceStep picks an axis step giving about ten ticks.
func niceStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute} {
		if span/s <= 12 {
			return s
		}
	}
	return 5 * time.Minute
}

var reportPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"count": func(r Result, c Check) int { return r.Counts[c] },
	"ms":    fmtMS,
	"secs":  func(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) },
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>redlock chaos report</title>
<style>
body{font-family:sans-serif;margin:20px;color:#222}
table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
td:first-child,th:first-child,td.l{text-align:left}
tr.bad td{background:#ffebee}
.viol{color:#c62828}
.ok{color:#2e7d32;font-weight:bold}.MISMATCH{color:#c62828;font-weight:bold}
section{margin-top:28px;border-top:2px solid #eee;padding-top:8px}
pre{font-size:11px;background:#fafafa;padding:6px;overflow-x:auto}
.legend span{display:inline-block;margin-right:14px}
</style></head><body>
<h1>redlock chaos report</h1>
<p>Started {{.R.Started.Format "2006-01-02 15:04:05"}}; {{if .R.Duration}}{{.R.Duration}} per scenario{{else}}short form (each schedule once){{end}}; {{.R.Elapsed.Round 1000000000}} in all.
{{if .R.OK}}<span class="ok">Every scenario met its expectation.</span>{{else}}<span class="MISMATCH">{{.R.Mismatches}} mismatched, {{len .R.Failed}} could not run.</span>{{end}}</p>
<p class="legend"><span>■ block: client acting as holder</span><span>▬ thin bar: its validity</span><span style="color:#c62828">■ red: overlapped another holder (check a)</span><span style="color:#c62828">▨ hatched: acted after its validity</span><span style="color:#e65100">▒ orange band: fault active</span><span style="color:#d50000">| red line: violation</span></p>
<table><tr><th>scenario</th><th>backend</th><th>expected</th><th>outcome</th><th>acquisitions</th>{{range .Checks}}<th>{{.}}</th>{{end}}<th>stale rejected</th><th>lost updates</th><th>p50</th><th>p99</th><th>recovery</th></tr>
{{range .Runs}}<tr{{if .Mismatch}} class="bad"{{end}}><td><a href="#{{.Anchor}}">{{.Scenario.Name}}</a></td><td class="l">{{.Backend}}</td><td class="l">{{.Scenario.Expect.Verdict}}</td><td class="l {{.Outcome}}">{{.Outcome}}</td><td>{{.Result.Acquisitions}}</td>{{$r := .Result}}{{range $.Checks}}<td{{if count $r .}} class="viol"{{end}}>{{count $r .}}</td>{{end}}<td>{{.Result.StaleRejected}}</td><td>{{.Result.LostUpdates}}</td><td>{{ms .Result.AcquireP50}}</td><td>{{ms .Result.AcquireP99}}</td><td>{{if .Result.RecoveryMeasured}}{{ms .Result.Recovery}}{{else}}-{{end}}</td></tr>
{{end}}{{range .R.Failed}}<tr class="bad"><td>{{.Scenario}}</td><td class="l">{{.Backend}}</td><td class="l" colspan="14">could not run: {{.Err}}</td></tr>{{end}}
</table>
{{range .Runs}}<section id="{{.Anchor}}">
<h2>{{.Scenario.Name}} <small>on {{.Backend}}</small> — <span class="{{.Outcome}}">{{.Outcome}}</span></h2>
<p>{{.Scenario.About}}. Expected <b>{{.Scenario.Expect.Verdict}}</b>; found <b>{{.Summary}}</b>.{{if .Mismatch}} <span class="MISMATCH">{{.Mismatch}}</span>{{end}}</p>
<p>Schedule: {{range $i, $s := .Steps}}{{if $i}} → {{end}}{{$s}}{{end}}</p>
<table><tr><th>acquisitions</th><th>attempts failed</th><th>fenced writes accepted</th><th>stale writes rejected</th><th>register writes</th><th>lost updates</th><th>client stalls</th><th>acquire p50</th><th>acquire p99</th><th>recovery</th><th>ran</th></tr>
<tr><td>{{.Result.Acquisitions}}</td><td>{{.Result.AcquireFailures}}</td><td>{{.Result.FencedAccepted}}</td><td>{{.Result.StaleRejected}}</td><td>{{.Result.RegisterWrites}}</td><td>{{.Result.LostUpdates}}</td><td>{{.Result.ClientStalls}}</td><td>{{ms .Result.AcquireP50}}</td><td>{{ms .Result.AcquireP99}}</td><td>{{if .Result.RecoveryMeasured}}{{ms .Result.Recovery}}{{else}}-{{end}}</td><td>{{.Elapsed.Round 1000000000}}</td></tr></table>
{{if .Zoom}}<h3>{{.ZoomNote}}</h3>{{.Zoom}}{{end}}
<h3>whole run</h3>{{.Full}}
{{if .Violations}}<h3>violations (first {{len .Violations}})</h3>{{range .Violations}}<p class="viol"><b>{{.Check}}</b> at {{secs .At}}: {{.Detail}}</p><pre>{{range .Excerpt}}{{.}}
{{end}}</pre>{{end}}{{end}}
</section>{{end}}
</body></html>
`))
