package progress

import (
	"fmt"
	"strings"
)

// barWidth is the number of cells in the bar between its brackets.
const barWidth = 30

// clearToEOL erases what an earlier, longer line left on the terminal.
const clearToEOL = "\x1b[K"

// barLine is the terminal line: carriage return, name, bar, amounts, rate,
// cut to width columns so it never wraps (a wrapped line cannot be redrawn).
func barLine(s snapshot, width int) string {
	var b strings.Builder
	b.WriteString(s.name)
	if s.total >= 0 {
		fmt.Fprintf(&b, " [%s] %s / %s %3d%%", bar(s.done, s.total, barWidth),
			humanBytes(s.done), humanBytes(s.total), percent(s.done, s.total))
	} else {
		fmt.Fprintf(&b, " %s", humanBytes(s.done))
	}
	fmt.Fprintf(&b, "  %s", s.rateText())
	line := b.String()
	if width > 1 && len(line) > width-1 {
		line = line[:width-1]
	}
	return "\r" + line + clearToEOL
}

// bar draws done/total as cells of '=' ending in '>' while incomplete.
func bar(done, total int64, width int) string {
	filled := width
	if total > 0 && done < total {
		filled = int(float64(done) / float64(total) * float64(width))
	}
	filled = max(0, min(filled, width))
	switch {
	case filled == width:
		return strings.Repeat("=", width)
	case filled == 0:
		return strings.Repeat(" ", width)
	}
	return strings.Repeat("=", filled-1) + ">" + strings.Repeat(" ", width-filled)
}

// percent is done/total in whole percent, 0..100; an empty total is complete.
func percent(done, total int64) int {
	if total <= 0 {
		return 100
	}
	p := int(done * 100 / total)
	return max(0, min(p, 100))
}

// humanBytes prints n in binary units: 512 B, 1.5 KiB, 3.0 MiB, 2.1 GiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
