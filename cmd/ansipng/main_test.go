package main

import (
	"image/color"
	"testing"

	"golang.org/x/image/font/gofont/gomono"
	"golang.org/x/image/font/gofont/gomonobold"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/font/sfnt"
)

func TestParseSGR(t *testing.T) {
	t.Parallel()
	// What tmux capture-pane -e emits for the dashboard: bold, basic,
	// 256-colour and true-colour foregrounds, dim, reverse, and resets.
	in := "\x1b[1mtsd\x1b[0m \x1b[32mok\x1b[39m\n" +
		"\x1b[38;5;196mR\x1b[38;2;1;2;3mT\x1b[2md\x1b[0m\x1b[7mv\x1b[27m\x1b]8;;x\x07l\n"
	g := Parse(in, 0, 0)
	if g.Cols != 6 || g.Rows != 2 {
		t.Fatalf("size %dx%d, want 6x2", g.Cols, g.Rows)
	}
	row0, row1 := g.Cells[0], g.Cells[1]
	if got := string([]rune{row0[0].R, row0[1].R, row0[2].R}); got != "tsd" || !row0[0].A.Bold {
		t.Errorf("row 0 starts %q bold=%v, want bold tsd", got, row0[0].A.Bold)
	}
	if row0[3].A.Bold {
		t.Error("SGR 0 did not clear bold")
	}
	if c := row0[4].A.FG; !c.Set || c.R != ansi16[2].R || c.G != ansi16[2].G {
		t.Errorf("green = %+v, want palette 2", c)
	}
	if c := row1[0].A.FG; c != (Colour{true, 255, 0, 0}) {
		t.Errorf("38;5;196 = %+v, want pure red", c)
	}
	if c := row1[1].A.FG; c != (Colour{true, 1, 2, 3}) {
		t.Errorf("38;2;1;2;3 = %+v", c)
	}
	if !row1[2].A.Dim || row1[2].A.FG != (Colour{true, 1, 2, 3}) {
		t.Errorf("dim cell %+v, want dim keeping its colour", row1[2].A)
	}
	if !row1[3].A.Rev || row1[3].A.Dim {
		t.Errorf("reverse cell %+v", row1[3].A)
	}
	if row1[4].R != 'l' || row1[4].A.Rev {
		t.Errorf("after OSC: %+v, want plain l (OSC dropped, 27 clears reverse)", row1[4])
	}
	if row1[5].R != ' ' || row1[5].A.FG.Set {
		t.Errorf("padding cell %+v, want a blank default cell", row1[5])
	}
}

func TestParseWideAndTabs(t *testing.T) {
	t.Parallel()
	g := Parse("a\tb\n界x", 0, 3)
	if g.Rows != 3 || g.Cols != 9 {
		t.Fatalf("size %dx%d, want 9x3", g.Cols, g.Rows)
	}
	if g.Cells[0][8].R != 'b' {
		t.Errorf("tab did not reach column 8: %q", string(g.Cells[0][8].R))
	}
	if g.Cells[1][0].R != '界' || g.Cells[1][1].R != 0 || g.Cells[1][2].R != 'x' {
		t.Errorf("wide rune row = %q %q %q", g.Cells[1][0].R, g.Cells[1][1].R, g.Cells[1][2].R)
	}
}

func TestColours(t *testing.T) {
	t.Parallel()
	fg, bg := Colours(Attr{})
	if fg != defaultFG || bg != defaultBG {
		t.Errorf("default = %v on %v", fg, bg)
	}
	fg, bg = Colours(Attr{Rev: true})
	if fg != defaultBG || bg != defaultFG {
		t.Errorf("reverse = %v on %v, want swapped defaults", fg, bg)
	}
	fg, _ = Colours(Attr{Dim: true})
	if fg == defaultFG || fg.R <= defaultBG.R {
		t.Errorf("dim fg %v is not between fg and bg", fg)
	}
}

func TestIndexedCube(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]Colour{16: {true, 0, 0, 0}, 21: {true, 0, 0, 255}, 231: {true, 255, 255, 255}, 232: {true, 8, 8, 8}, 255: {true, 238, 238, 238}} {
		if got := indexed(n); got != want {
			t.Errorf("indexed(%d) = %+v, want %+v", n, got, want)
		}
	}
}

func goFonts(t *testing.T) (*sfnt.Font, *sfnt.Font) {
	t.Helper()
	r, err := opentype.Parse(gomono.TTF)
	if err != nil {
		t.Fatal(err)
	}
	b, err := opentype.Parse(gomonobold.TTF)
	if err != nil {
		t.Fatal(err)
	}
	return r, b
}

// Box lines must join across cells: a row of ─ is one unbroken line, and
// │ in the row below continues straight down from ┬.
func TestRenderBoxJoins(t *testing.T) {
	t.Parallel()
	r, b := goFonts(t)
	g := Parse("─┬─\n │ ", 0, 0)
	img, err := Render(g, r, b, nil, 16, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, h := img.Bounds().Dx()/3, img.Bounds().Dy()/2
	lineY := -1
	for y := 0; y < h; y++ {
		if img.RGBAAt(0, y) == defaultFG {
			lineY = y
			break
		}
	}
	if lineY < 0 {
		t.Fatal("no horizontal line drawn in the first cell")
	}
	for x := 0; x < 3*w; x++ {
		if img.RGBAAt(x, lineY) != defaultFG {
			t.Fatalf("horizontal line broken at x=%d", x)
		}
	}
	var lineX = -1
	for x := w; x < 2*w; x++ {
		if img.RGBAAt(x, 2*h-1) == defaultFG {
			lineX = x
			break
		}
	}
	if lineX < 0 {
		t.Fatal("no vertical line in the second row")
	}
	for y := lineY; y < 2*h; y++ {
		if img.RGBAAt(lineX, y) != defaultFG {
			t.Fatalf("vertical line broken at y=%d", y)
		}
	}
}

func TestRenderColoursAndSize(t *testing.T) {
	t.Parallel()
	r, b := goFonts(t)
	g := Parse("\x1b[41m \x1b[0m\x1b[7m \x1b[0m", 4, 2)
	img, err := Render(g, r, b, nil, 16, 5)
	if err != nil {
		t.Fatal(err)
	}
	adv := img.Bounds().Dx() - 10
	if adv%4 != 0 || img.Bounds().Dy() <= 10 {
		t.Fatalf("image %v is not 4 whole cells wide plus padding", img.Bounds())
	}
	cw := adv / 4
	if got := img.RGBAAt(5+cw/2, 8); got != ansi16[1] {
		t.Errorf("red background cell = %v, want %v", got, ansi16[1])
	}
	if got := img.RGBAAt(5+cw+cw/2, 8); got != defaultFG {
		t.Errorf("reverse blank cell = %v, want the default fg %v", got, defaultFG)
	}
	if got := img.RGBAAt(1, 1); got != (color.RGBA{defaultBG.R, defaultBG.G, defaultBG.B, 0xff}) {
		t.Errorf("padding = %v, want the default bg", got)
	}
}
