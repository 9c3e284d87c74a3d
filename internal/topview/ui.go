package topview

import (
	"context"
	"errors"
	"io"

	"github.com/gdamore/tcell/v2"
)

// RunOptions tune Run.
type RunOptions struct {
	// EndMessage is shown when the source ends cleanly (io.EOF).
	// Default: "end of data — q quits".
	EndMessage string
	// AfterDraw, when set, is called after every frame is shown (tests read
	// the screen there).
	AfterDraw func(tcell.Screen)
}

// result is one answer of the source.
type result struct {
	snap Snapshot
	err  error
}

// Run shows m on scr, fed by src, until the user quits (q, ctrl-c) or ctx is
// done. scr must be initialised; Run does not finalise it. Source errors do
// not end Run: transient ones are shown and retried, and after the source
// ends the last frame stays until the user quits.
func Run(ctx context.Context, scr tcell.Screen, src Source, m *Model, opt RunOptions) error {
	if opt.EndMessage == "" {
		opt.EndMessage = "end of data — q quits"
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	results := make(chan result)
	go pump(ctx, src, results)

	events := make(chan tcell.Event, 16)
	quit := make(chan struct{})
	defer close(quit)
	go scr.ChannelEvents(events, quit)

	scr.HideCursor()
	draw(scr, m, opt)
	for {
		// While paused, leave the source's answer unreceived: the pump (and
		// a replay) waits until the view resumes.
		in := results
		if m.Paused() {
			in = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			switch ev := ev.(type) {
			case *tcell.EventKey:
				k, r := mapKey(ev)
				if m.HandleKey(k, r) == ActQuit {
					return nil
				}
			case *tcell.EventResize:
				scr.Sync()
			}
		case res := <-in:
			switch {
			case res.err == nil:
				m.Apply(res.snap)
			case errors.Is(res.err, io.EOF):
				m.End(opt.EndMessage, false)
				results = nil
			case isFinal(res.err):
				m.End(res.err.Error()+" — q quits", true)
				results = nil
			default:
				m.SetError(res.err)
			}
		}
		draw(scr, m, opt)
	}
}

// pump pulls from src until it ends or ctx is done.
func pump(ctx context.Context, src Source, out chan<- result) {
	for {
		s, err := src.Next(ctx)
		if ctx.Err() != nil {
			return
		}
		select {
		case out <- result{s, err}:
		case <-ctx.Done():
			return
		}
		if err != nil && isFinal(err) {
			return
		}
	}
}

func mapKey(ev *tcell.EventKey) (Key, rune) {
	switch ev.Key() {
	case tcell.KeyRune:
		return KeyRune, ev.Rune()
	case tcell.KeyEnter:
		return KeyEnter, 0
	case tcell.KeyEscape:
		return KeyEsc, 0
	case tcell.KeyBackspace, tcell.KeyBackspace2:
		return KeyBackspace, 0
	case tcell.KeyUp:
		return KeyUp, 0
	case tcell.KeyDown:
		return KeyDown, 0
	case tcell.KeyPgUp:
		return KeyPgUp, 0
	case tcell.KeyPgDn:
		return KeyPgDn, 0
	case tcell.KeyHome:
		return KeyHome, 0
	case tcell.KeyEnd:
		return KeyEnd, 0
	case tcell.KeyCtrlC:
		return KeyCtrlC, 0
	}
	return KeyOther, 0
}

var styles = map[Style]tcell.Style{
	StyleNormal:      tcell.StyleDefault,
	StyleHeader:      tcell.StyleDefault.Reverse(true).Bold(true),
	StyleTitle:       tcell.StyleDefault.Bold(true),
	StyleTitleSorted: tcell.StyleDefault.Bold(true).Underline(true),
	StyleHot:         tcell.StyleDefault.Bold(true).Foreground(tcell.ColorRed),
	StyleCold:        tcell.StyleDefault.Dim(true),
	StyleError:       tcell.StyleDefault.Bold(true).Foreground(tcell.ColorRed),
	StyleInfo:        tcell.StyleDefault,
	StyleFooter:      tcell.StyleDefault.Reverse(true),
}

// draw paints one frame.
func draw(scr tcell.Screen, m *Model, opt RunOptions) {
	w, h := scr.Size()
	scr.Clear()
	for y, l := range m.Frame(w, h) {
		x := 0
		for _, s := range l {
			scr.PutStrStyled(x, y, s.Text, styles[s.Style])
			x += width(s.Text)
		}
	}
	scr.Show()
	if opt.AfterDraw != nil {
		opt.AfterDraw(scr)
	}
}
