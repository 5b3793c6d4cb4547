package scenario

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Bar is one bar of a chart.
type Bar struct {
	Label string
	Value float64
}

// Chart is one panel of a plot: a bar per arm of one measure, or, with
// Series, one curve per method (plotcurve.go).
type Chart struct {
	Title string
	Unit  string
	Bars  []Bar
	// Series, when set, draws curves instead of bars; XUnit names X.
	Series []Series
	XUnit  string
}

// Report is what every scenario returns: JSON for machines (the value
// itself), and charts for --plot. Its table for people is its JSON's, as
// JSONTable prints it, unless it writes its own (WriteTable, as a Python
// driver's report does, to name the sections shown).
type Report interface {
	Charts() []Chart
}

var barColors = []string{"#8c8c8c", "#4e79a7", "#59a14f", "#f28e2b", "#e15759", "#76b7b2"}

// WriteSVG draws charts as panels side by side: a small, dependency-free
// SVG bar chart of a scenario's arms.
func WriteSVG(w io.Writer, title string, charts []Chart) error {
	const panelW, panelH, top, bottom, left = 300, 260, 50, 60, 50
	width := max(1, len(charts)) * panelW
	height := panelH + top + bottom
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" text-anchor="middle" font-size="15" font-weight="bold">%s</text>`+"\n", width/2, html.EscapeString(title))
	for i, c := range charts {
		x0 := i*panelW + left
		plotW := panelW - left - 20
		label := c.Title
		if c.Unit != "" {
			label += " (" + c.Unit + ")"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-weight="bold">%s</text>`+"\n", x0+plotW/2, top-10, html.EscapeString(label))
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, top, x0, top+panelH)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, top+panelH, x0+plotW, top+panelH)
		if len(c.Series) > 0 {
			writeCurves(&b, c, x0, top, plotW, panelH)
			continue
		}
		peak := 0.0
		for _, bar := range c.Bars {
			if finite(bar.Value) {
				peak = math.Max(peak, bar.Value)
			}
		}
		if peak <= 0 {
			peak = 1
		}
		slot := plotW / max(1, len(c.Bars))
		for j, bar := range c.Bars {
			v := bar.Value
			if !finite(v) || v < 0 {
				v = 0
			}
			h := int(float64(panelH-20) * v / peak)
			bx := x0 + j*slot + slot/6
			bw := slot * 2 / 3
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", bx, top+panelH-h, bw, h, barColors[j%len(barColors)])
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", bx+bw/2, top+panelH-h-4, formatNumber(bar.Value))
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", bx+bw/2, top+panelH+16, html.EscapeString(bar.Label))
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// formatNumber prints a measurement, in a chart or a table: whole from a
// thousand up, else to four significant digits; "-" when it is not finite.
func formatNumber(v float64) string {
	switch {
	case !finite(v):
		return "-"
	case math.Abs(v) >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
