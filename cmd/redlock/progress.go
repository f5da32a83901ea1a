package main

import (
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/term"
)

// progress writes the demo's output: event lines, plus on a terminal a status line that is
// redrawn in place below them. Off a terminal (a pipe, a CI log) there is no status line and
// the caller prints periodic plain lines instead.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	width int    // terminal columns; the status line is cut to fit, or \r would not redraw it
	shown string // the status line on screen now, "" if none
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 1 {
			p.width = cols - 1
		} else {
			p.width = 79
		}
	}
	return p
}

// eventf prints one line, keeping the status line (if any) below it.
func (p *progress) eventf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown != "" {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
	if p.shown != "" {
		fmt.Fprint(p.w, p.shown)
	}
}

// status replaces the status line on a terminal; it does nothing elsewhere.
func (p *progress) status(line string) {
	if !p.tty {
		return
	}
	if r := []rune(line); len(r) > p.width {
		line = string(r[:p.width-1]) + "…"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.w, "\r\033[K"+line)
	p.shown = line
}

// clearStatus removes the status line, before the final table.
func (p *progress) clearStatus() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown != "" {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = ""
	}
}
