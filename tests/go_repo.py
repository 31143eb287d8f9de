"""A small real Go module for the Go language's tests: ``gostats``.

``example.com/gostats`` (go 1.19) requires ``github.com/google/go-cmp`` (Debian's
golang-github-google-go-cmp-dev provides it; go.sum holds the upstream checksums). Its package ``stats``
has a ``Median`` that forgets to sort. Commits after the initial one, each a candidate:

- fix-median: sorts a copy in ``Median`` and adds ``TestMedian`` with subtests: ``sorted`` passes at the
  base already (PASS_TO_PASS), ``unsorted`` and ``TestMedian`` itself fail there (FAIL_TO_PASS);
- int-mean: makes ``Mean`` truncate and adds a test for ``Sum``; it breaks ``TestMean`` (PASS_TO_FAIL);
- docs: README only (filtered).

Dates and identities are fixed, so commit ids are the same on every machine.
"""

from __future__ import annotations

from pathlib import Path

try:
    from .code_repo import _commit, _git, _write
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import _commit, _git, _write

MODULE = "example.com/gostats"
GO_MOD = """module example.com/gostats

go 1.19

require github.com/google/go-cmp v0.5.9
"""
GO_SUM = """github.com/google/go-cmp v0.5.9 h1:O2Tfq5qg4qc4AmwVlvv0oLiVAGB7enBSJ2x2DqQFi38=
github.com/google/go-cmp v0.5.9/go.mod h1:17dUlkBOakJ0+DkrSSNjCkIjxS6bF9zb3elmeNGIjoY=
"""

STATS = """// Package stats computes simple statistics of float64 samples.
package stats

// Sum adds the samples up.
func Sum(xs []float64) float64 {
	total := 0.0
	for _, x := range xs {
		total += x
	}
	return total
}

// Mean is the arithmetic mean (0 for no samples).
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return Sum(xs) / float64(len(xs))
}

// Median is the middle sample (the mean of the two middle ones for an even count).
func Median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
"""

STATS_FIXED = STATS.replace("""package stats

""", """package stats

import "sort"

""").replace("""	n := len(xs)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {""", """	n := len(xs)
	if n == 0 {
		return 0
	}
	xs = append([]float64(nil), xs...)
	sort.Float64s(xs)
	if n%2 == 1 {""")

TESTS = """package stats

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMean(t *testing.T) {
	if diff := cmp.Diff(2.5, Mean([]float64{1, 2, 3, 4})); diff != "" {
		t.Errorf("Mean mismatch (-want +got):\\n%s", diff)
	}
}

func TestSum(t *testing.T) {
	cases := map[string]struct {
		in   []float64
		want float64
	}{
		"empty": {nil, 0},
		"three": {[]float64{1, 2, 3}, 6},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, Sum(c.in)); diff != "" {
				t.Errorf("Sum(%v) mismatch (-want +got):\\n%s", c.in, diff)
			}
		})
	}
}
"""

TESTS_MEDIAN = TESTS + """
func TestMedian(t *testing.T) {
	t.Run("sorted", func(t *testing.T) {
		if got := Median([]float64{1, 2, 3}); got != 2 {
			t.Errorf("Median = %v, want 2", got)
		}
	})
	t.Run("unsorted", func(t *testing.T) {
		if got := Median([]float64{9, 1, 4, 3}); got != 3.5 {
			t.Errorf("Median = %v, want 3.5 (the samples were not sorted)", got)
		}
	})
}
"""

STATS_INT_MEAN = STATS_FIXED.replace("	return Sum(xs) / float64(len(xs))",
                                     "	return float64(int(Sum(xs)) / len(xs))")
TESTS_SUM_NEG = TESTS_MEDIAN + """
func TestSumNegative(t *testing.T) {
	if got := Sum([]float64{-1, -2}); got != -3 {
		t.Errorf("Sum = %v, want -3", got)
	}
}
"""


def make_gostats_repo(root: Path) -> dict[str, str]:
    """Create the repository at ``root``; return {initial, fix, intmean, docs: commit id}."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"go.mod": GO_MOD, "go.sum": GO_SUM, "stats/stats.go": STATS, "stats/stats_test.go": TESTS,
                  "README.md": "# gostats\n\nSimple statistics.\n"})
    shas = {"initial": _commit(root, "initial import", 1)}
    _write(root, {"stats/stats.go": STATS_FIXED, "stats/stats_test.go": TESTS_MEDIAN})
    shas["fix"] = _commit(root, "stats: Median sorts its samples first\n\nFixes #3.", 2)
    _write(root, {"stats/stats.go": STATS_INT_MEAN, "stats/stats_test.go": TESTS_SUM_NEG})
    shas["intmean"] = _commit(root, "stats: compute the mean in integers, and test that negative sums stay negative", 3)
    _write(root, {"README.md": "# gostats\n\nSimple statistics: sum, mean, median.\n"})
    shas["docs"] = _commit(root, "docs: list the statistics the package computes in the README", 4)
    return shas
