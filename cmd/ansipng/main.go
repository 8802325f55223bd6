// Command ansipng renders a terminal screen captured with colours
// (`tmux capture-pane -e -p`) to a PNG, cell by cell, so the docs can show
// the dashboard as a person sees it without a browser or a terminal
// emulator: the output depends only on the input and the font files.
//
// Usage: ansipng [-font F] [-bold-font F] [-size PX] [-cols N] [-rows N] -o OUT.png [IN.ansi]
//
// Box-drawing lines, block elements and shades are drawn as rectangles
// rather than glyphs, so borders and bars join across cells whatever the
// font's metrics.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gomono"
	"golang.org/x/image/font/gofont/gomonobold"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/font/sfnt"
	"golang.org/x/image/math/fixed"
	"golang.org/x/text/width"
)

func main() {
	var (
		fontPath = flag.String("font", "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf", "regular monospace font (TTF); Go Mono if unreadable")
		boldPath = flag.String("bold-font", "/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf", "bold monospace font (TTF)")
		fallback = flag.String("fallback-font", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "font for glyphs the monospace font lacks")
		size     = flag.Float64("size", 16, "font size in pixels")
		cols     = flag.Int("cols", 0, "screen width in cells (0: the widest line)")
		rows     = flag.Int("rows", 0, "screen height in cells (0: the number of lines)")
		pad      = flag.Int("pad", 14, "margin around the screen in pixels")
		out      = flag.String("o", "", "output PNG (required)")
	)
	flag.Parse()
	if *out == "" || flag.NArg() > 1 {
		fmt.Fprintln(os.Stderr, "usage: ansipng [flags] -o OUT.png [IN.ansi]")
		flag.PrintDefaults()
		os.Exit(2)
	}
	if err := run(*fontPath, *boldPath, *fallback, *size, *cols, *rows, *pad, *out, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "ansipng:", err)
		os.Exit(1)
	}
}

func run(fontPath, boldPath, fallbackPath string, size float64, cols, rows, pad int, out, in string) error {
	var r io.Reader = os.Stdin
	if in != "" && in != "-" {
		f, err := os.Open(in)
		if err != nil {
			return fmt.Errorf("open capture: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(bufio.NewReader(r))
	if err != nil {
		return fmt.Errorf("read capture: %w", err)
	}
	grid := Parse(string(data), cols, rows)

	regular, err := loadFont(fontPath, gomono.TTF)
	if err != nil {
		return err
	}
	bold, err := loadFont(boldPath, gomonobold.TTF)
	if err != nil {
		return err
	}
	fonts := []*sfnt.Font{regular, bold}
	var fb *sfnt.Font
	if b, err := os.ReadFile(fallbackPath); err == nil {
		if fb, err = opentype.Parse(b); err != nil {
			return fmt.Errorf("parse fallback font %s: %w", fallbackPath, err)
		}
		fonts = append(fonts, fb)
	}
	img, err := Render(grid, fonts[0], fonts[1], fb, size, pad)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("create png: %w", err)
	}
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("encode png: %w", err)
	}
	return f.Close()
}

// loadFont reads a TTF, falling back to an embedded Go font so the tool
// still works where the Debian fonts are missing (with fewer glyphs).
func loadFont(path string, embedded []byte) (*sfnt.Font, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ansipng: %v; using the embedded Go Mono font\n", err)
		b = embedded
	}
	f, err := opentype.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("parse font %s: %w", path, err)
	}
	return f, nil
}

// Colour is a terminal colour: the default (fg or bg, per its use) or an
// RGB value.
type Colour struct {
	Set     bool
	R, G, B uint8
}

// Attr is a cell's rendition.
type Attr struct {
	FG, BG                        Colour
	Bold, Dim, Italic, Under, Rev bool
}

// Cell is one screen cell. Wide runes occupy two cells; the second holds
// rune 0.
type Cell struct {
	R rune
	A Attr
}

// Grid is a parsed screen, Rows × Cols.
type Grid struct {
	Cols, Rows int
	Cells      [][]Cell
}

// The palette: a dark theme, readable on GitHub's light and dark pages.
var (
	defaultFG = color.RGBA{0xd4, 0xd7, 0xdd, 0xff}
	defaultBG = color.RGBA{0x16, 0x19, 0x1f, 0xff}
	ansi16    = [16]color.RGBA{
		{0x2a, 0x2e, 0x36, 0xff}, {0xe0, 0x6c, 0x75, 0xff}, {0x98, 0xc3, 0x79, 0xff}, {0xe5, 0xc0, 0x7b, 0xff},
		{0x61, 0xaf, 0xef, 0xff}, {0xc6, 0x78, 0xdd, 0xff}, {0x56, 0xb6, 0xc2, 0xff}, {0xc8, 0xcc, 0xd4, 0xff},
		{0x5c, 0x63, 0x70, 0xff}, {0xff, 0x7a, 0x85, 0xff}, {0xb5, 0xe0, 0x90, 0xff}, {0xff, 0xd6, 0x8a, 0xff},
		{0x7d, 0xc4, 0xff, 0xff}, {0xde, 0x90, 0xf5, 0xff}, {0x6f, 0xd3, 0xe0, 0xff}, {0xff, 0xff, 0xff, 0xff},
	}
)

func indexed(n int) Colour {
	switch {
	case n < 0 || n > 255:
		return Colour{}
	case n < 16:
		c := ansi16[n]
		return Colour{true, c.R, c.G, c.B}
	case n < 232:
		n -= 16
		lv := func(v int) uint8 {
			if v == 0 {
				return 0
			}
			return uint8(55 + 40*v)
		}
		return Colour{true, lv(n / 36), lv(n / 6 % 6), lv(n % 6)}
	default:
		v := uint8(8 + 10*(n-232))
		return Colour{true, v, v, v}
	}
}

// Parse turns captured text with SGR escapes into a grid. Other escape
// sequences are dropped; the rendition carries across lines, as in a
// terminal. cols/rows of 0 take the input's own size.
func Parse(s string, cols, rows int) Grid {
	s = strings.TrimSuffix(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	lines := strings.Split(s, "\n")
	var a Attr
	var out [][]Cell
	maxw := 0
	for _, line := range lines {
		var row []Cell
		for i := 0; i < len(line); {
			if line[i] == 0x1b {
				i = escape(line, i, &a)
				continue
			}
			r, n := utf8.DecodeRuneInString(line[i:])
			i += n
			switch {
			case r == '\t':
				row = append(row, Cell{' ', a})
				for len(row)%8 != 0 {
					row = append(row, Cell{' ', a})
				}
			case r < 0x20 || r == 0x7f:
			default:
				row = append(row, Cell{r, a})
				if k := width.LookupRune(r).Kind(); k == width.EastAsianWide || k == width.EastAsianFullwidth {
					row = append(row, Cell{0, a})
				}
			}
		}
		maxw = max(maxw, len(row))
		out = append(out, row)
	}
	if cols <= 0 {
		cols = maxw
	}
	if rows <= 0 {
		rows = len(out)
	}
	g := Grid{Cols: cols, Rows: rows, Cells: make([][]Cell, rows)}
	for y := range rows {
		row := make([]Cell, cols)
		for x := range row {
			row[x] = Cell{R: ' '}
		}
		if y < len(out) {
			copy(row, out[y])
		}
		g.Cells[y] = row
	}
	return g
}

// escape consumes the escape sequence at s[i] and returns the index after
// it, applying SGR parameters to a.
func escape(s string, i int, a *Attr) int {
	if i+1 >= len(s) {
		return len(s)
	}
	switch s[i+1] {
	case '[':
		j := i + 2
		for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
			j++
		}
		if j >= len(s) {
			return len(s)
		}
		if s[j] == 'm' {
			sgr(s[i+2:j], a)
		}
		return j + 1
	case ']', 'P', '_': // OSC, DCS, APC: up to BEL or ST
		for j := i + 2; j < len(s); j++ {
			if s[j] == 0x07 {
				return j + 1
			}
			if s[j] == 0x1b && j+1 < len(s) && s[j+1] == '\\' {
				return j + 2
			}
		}
		return len(s)
	default:
		return i + 2
	}
}

func sgr(params string, a *Attr) {
	if params == "" {
		*a = Attr{}
		return
	}
	f := strings.FieldsFunc(params, func(r rune) bool { return r == ';' || r == ':' })
	p := make([]int, len(f))
	for k, v := range f {
		p[k], _ = strconv.Atoi(v)
	}
	for k := 0; k < len(p); k++ {
		switch n := p[k]; {
		case n == 0:
			*a = Attr{}
		case n == 1:
			a.Bold = true
		case n == 2:
			a.Dim = true
		case n == 3:
			a.Italic = true
		case n == 4:
			a.Under = true
		case n == 7:
			a.Rev = true
		case n == 22:
			a.Bold, a.Dim = false, false
		case n == 23:
			a.Italic = false
		case n == 24:
			a.Under = false
		case n == 27:
			a.Rev = false
		case n >= 30 && n <= 37:
			a.FG = indexed(n - 30)
		case n >= 90 && n <= 97:
			a.FG = indexed(n - 90 + 8)
		case n == 39:
			a.FG = Colour{}
		case n >= 40 && n <= 47:
			a.BG = indexed(n - 40)
		case n >= 100 && n <= 107:
			a.BG = indexed(n - 100 + 8)
		case n == 49:
			a.BG = Colour{}
		case n == 38 || n == 48:
			var c Colour
			switch {
			case k+2 < len(p) && p[k+1] == 5:
				c = indexed(p[k+2])
				k += 2
			case k+4 < len(p) && p[k+1] == 2:
				c = Colour{true, uint8(p[k+2]), uint8(p[k+3]), uint8(p[k+4])}
				k += 4
			default:
				k = len(p)
			}
			if n == 38 {
				a.FG = c
			} else {
				a.BG = c
			}
		}
	}
}

func rgba(c Colour, def color.RGBA) color.RGBA {
	if !c.Set {
		return def
	}
	return color.RGBA{c.R, c.G, c.B, 0xff}
}

func mix(a, b color.RGBA, t float64) color.RGBA {
	m := func(x, y uint8) uint8 { return uint8(float64(x)*(1-t) + float64(y)*t + 0.5) }
	return color.RGBA{m(a.R, b.R), m(a.G, b.G), m(a.B, b.B), 0xff}
}

// Colours resolves a cell's rendition to the pixels it paints.
func Colours(a Attr) (fg, bg color.RGBA) {
	fg, bg = rgba(a.FG, defaultFG), rgba(a.BG, defaultBG)
	if a.Rev {
		fg, bg = bg, fg
	}
	if a.Dim {
		fg = mix(fg, bg, 0.45)
	}
	return fg, bg
}

// Render paints the grid with the given fonts (fallback may be nil).
func Render(g Grid, regular, bold, fallback *sfnt.Font, size float64, pad int) (*image.RGBA, error) {
	opts := &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingFull}
	var faces [3]font.Face
	for k, f := range []*sfnt.Font{regular, bold, fallback} {
		if f == nil {
			continue
		}
		face, err := opentype.NewFace(f, opts)
		if err != nil {
			return nil, fmt.Errorf("make font face: %w", err)
		}
		defer face.Close()
		faces[k] = face
	}
	m := faces[0].Metrics()
	adv, _ := faces[0].GlyphAdvance('M')
	cw := adv.Round()
	ch := (m.Ascent + m.Descent).Ceil()
	ascent := m.Ascent.Round()

	img := image.NewRGBA(image.Rect(0, 0, g.Cols*cw+2*pad, g.Rows*ch+2*pad))
	draw.Draw(img, img.Bounds(), image.NewUniform(defaultBG), image.Point{}, draw.Src)
	var buf sfnt.Buffer
	has := func(f *sfnt.Font, r rune) bool {
		if f == nil {
			return false
		}
		x, err := f.GlyphIndex(&buf, r)
		return err == nil && x != 0
	}
	for y, row := range g.Cells {
		for x, c := range row {
			fg, bg := Colours(c.A)
			cell := image.Rect(pad+x*cw, pad+y*ch, pad+(x+1)*cw, pad+(y+1)*ch)
			if c.R == 0 { // second half of a wide rune: painted with the first
				continue
			}
			wcell := cell
			if x+1 < len(row) && row[x+1].R == 0 {
				wcell.Max.X += cw
			}
			fill(img, wcell, bg)
			if c.R == ' ' {
				continue
			}
			if !drawShape(img, cell, c.R, fg, bg) {
				face, f := faces[0], regular
				if c.A.Bold {
					face, f = faces[1], bold
				}
				if !has(f, c.R) && has(fallback, c.R) {
					face = faces[2]
				}
				d := font.Drawer{Dst: img, Src: image.NewUniform(fg), Face: face,
					Dot: fixed.P(cell.Min.X, cell.Min.Y+ascent)}
				// Centre glyphs narrower or wider than the cell (fallback font).
				if a, ok := face.GlyphAdvance(c.R); ok && a.Round() != wcell.Dx() {
					d.Dot.X += fixed.I(wcell.Dx()-a.Round()) / 2
				}
				d.DrawString(string(c.R))
			}
			if c.A.Under {
				fill(img, image.Rect(cell.Min.X, cell.Min.Y+ascent+1, wcell.Max.X, cell.Min.Y+ascent+2), fg)
			}
		}
	}
	return img, nil
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// box lists the arms (up, right, down, left) of box-drawing runes and
// their weight (1 light, 2 heavy, 3 double, drawn heavy).
var box = map[rune][5]int{
	'─': {0, 1, 0, 1, 1}, '│': {1, 0, 1, 0, 1}, '━': {0, 1, 0, 1, 2}, '┃': {1, 0, 1, 0, 2},
	'┌': {0, 1, 1, 0, 1}, '┐': {0, 0, 1, 1, 1}, '└': {1, 1, 0, 0, 1}, '┘': {1, 0, 0, 1, 1},
	'╭': {0, 1, 1, 0, 1}, '╮': {0, 0, 1, 1, 1}, '╰': {1, 1, 0, 0, 1}, '╯': {1, 0, 0, 1, 1},
	'├': {1, 1, 1, 0, 1}, '┤': {1, 0, 1, 1, 1}, '┬': {0, 1, 1, 1, 1}, '┴': {1, 1, 0, 1, 1},
	'┼': {1, 1, 1, 1, 1}, '┏': {0, 1, 1, 0, 2}, '┓': {0, 0, 1, 1, 2}, '┗': {1, 1, 0, 0, 2},
	'┛': {1, 0, 0, 1, 2}, '┣': {1, 1, 1, 0, 2}, '┫': {1, 0, 1, 1, 2}, '┳': {0, 1, 1, 1, 2},
	'┻': {1, 1, 0, 1, 2}, '╋': {1, 1, 1, 1, 2}, '═': {0, 1, 0, 1, 3}, '║': {1, 0, 1, 0, 3},
	'╔': {0, 1, 1, 0, 3}, '╗': {0, 0, 1, 1, 3}, '╚': {1, 1, 0, 0, 3}, '╝': {1, 0, 0, 1, 3},
	'╴': {0, 0, 0, 1, 1}, '╵': {1, 0, 0, 0, 1}, '╶': {0, 1, 0, 0, 1}, '╷': {0, 0, 1, 0, 1},
}

// drawShape paints runes that must tile seamlessly; false for the rest.
func drawShape(img *image.RGBA, c image.Rectangle, r rune, fg, bg color.RGBA) bool {
	w, h := c.Dx(), c.Dy()
	// Full blocks and shades are bars in this dashboard: a little gap
	// between rows keeps stacked bars apart.
	bar := image.Rect(c.Min.X, c.Min.Y+h/8, c.Max.X, c.Max.Y-h/8)
	switch r {
	case '█':
		fill(img, bar, fg)
	case '▀':
		fill(img, image.Rect(c.Min.X, c.Min.Y, c.Max.X, c.Min.Y+h/2), fg)
	case '▄':
		fill(img, image.Rect(c.Min.X, c.Min.Y+h/2, c.Max.X, c.Max.Y), fg)
	case '▌':
		fill(img, image.Rect(c.Min.X, c.Min.Y, c.Min.X+w/2, c.Max.Y), fg)
	case '▐':
		fill(img, image.Rect(c.Min.X+w/2, c.Min.Y, c.Max.X, c.Max.Y), fg)
	case '░':
		fill(img, bar, mix(bg, fg, 0.22))
	case '▒':
		fill(img, bar, mix(bg, fg, 0.45))
	case '▓':
		fill(img, bar, mix(bg, fg, 0.7))
	default:
		if r >= '▁' && r <= '▇' { // lower eighths
			n := int(r-'▁') + 1
			fill(img, image.Rect(c.Min.X, c.Max.Y-h*n/8, c.Max.X, c.Max.Y), fg)
			return true
		}
		arms, ok := box[r]
		if !ok {
			return false
		}
		t := max(1, w/9)
		if arms[4] > 1 {
			t = max(2, w/5)
		}
		cx, cy := c.Min.X+(w-t)/2, c.Min.Y+(h-t)/2
		if arms[0] == 1 {
			fill(img, image.Rect(cx, c.Min.Y, cx+t, cy+t), fg)
		}
		if arms[1] == 1 {
			fill(img, image.Rect(cx, cy, c.Max.X, cy+t), fg)
		}
		if arms[2] == 1 {
			fill(img, image.Rect(cx, cy, cx+t, c.Max.Y), fg)
		}
		if arms[3] == 1 {
			fill(img, image.Rect(c.Min.X, cy, cx+t, cy+t), fg)
		}
	}
	return true
}
