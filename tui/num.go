package tui

import (
	"strconv"

	"github.com/charmbracelet/x/ansi"
)

func itoa(n int) string { return strconv.Itoa(n) }

func ftoa(f float64, prec int) string { return strconv.FormatFloat(f, 'f', prec, 64) }

func textWidthANSI(s string) int { return ansi.StringWidth(s) }
