package scenario

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Point is one measurement of a curve.
type Point struct {
	X, Y  float64
	Label string
}

// Series is one method's curve.
type Series struct {
	Name   string
	Points []Point
}

// writeCurves draws c's series in the panel at (x0, top) of plotW by
// panelH: X from 0 to its largest value, Y from 0 to its largest, each
// series a polyline with its points marked, and a legend.
func writeCurves(b *strings.Builder, c Chart, x0, top, plotW, panelH int) {
	xMax, yMax := 0.0, 0.0
	for _, s := range c.Series {
		for _, p := range s.Points {
			if finite(p.X) && finite(p.Y) {
				xMax, yMax = math.Max(xMax, p.X), math.Max(yMax, p.Y)
			}
		}
	}
	if xMax <= 0 {
		xMax = 1
	}
	if yMax <= 0 {
		yMax = 1
	}
	h := float64(panelH - 20)
	at := func(p Point) (float64, float64) {
		return float64(x0) + float64(plotW)*p.X/xMax, float64(top+panelH) - h*p.Y/yMax
	}
	for j, s := range c.Series {
		color := barColors[(j+1)%len(barColors)]
		var pts []string
		for _, p := range s.Points {
			if !finite(p.X) || !finite(p.Y) {
				continue
			}
			x, y := at(p)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s %s: %s, %s</title></circle>`+"\n",
				x, y, color, html.EscapeString(s.Name), html.EscapeString(p.Label), formatNumber(p.X), formatNumber(p.Y))
		}
		if len(pts) > 1 {
			fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", strings.Join(pts, " "), color)
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", x0+plotW-90, top+14*(j+1), color, html.EscapeString(s.Name))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", x0+plotW, top+panelH+16, formatNumber(xMax))
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x0+plotW/2, top+panelH+32, html.EscapeString(c.XUnit))
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", x0-4, top+24, formatNumber(yMax))
}
