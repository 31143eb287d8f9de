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


# ---------------------------------------------------------------- uuidish: a base that does not build


UUID_GO_MOD = "module example.com/uuidish\n\ngo 1.19\n"
UUID = """// Package uuid parses and formats RFC 4122 UUIDs.
package uuid

import (
	"encoding/hex"
	"errors"
	"strings"
)

// A UUID is 16 bytes.
type UUID [16]byte

// UUIDs is a slice of UUIDs.
type UUIDs []UUID

// ErrFormat is what Parse returns for text that is not a UUID.
var ErrFormat = errors.New("uuid: invalid format")

// Parse reads the canonical form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func Parse(s string) (UUID, error) {
	var u UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, ErrFormat
	}
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil {
		return u, ErrFormat
	}
	copy(u[:], b)
	return u, nil
}

// String is the canonical form.
func (u UUID) String() string {
	h := hex.EncodeToString(u[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Version is the version number in the UUID's bits.
func (u UUID) Version() int {
	return int(u[6] >> 4)
}
"""
UUID_TESTS = """package uuid

import "testing"

const v4 = "f47ac10b-58cc-4372-8567-0e02b2c3d479"

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in string
		ok bool
	}{
		{v4, true},
		{"f47ac10b58cc437285670e02b2c3d479", false},
		{"x47ac10b-58cc-4372-8567-0e02b2c3d479", false},
	} {
		if _, err := Parse(tt.in); (err == nil) != tt.ok {
			t.Errorf("Parse(%q): err = %v", tt.in, err)
		}
	}
}

func TestString(t *testing.T) {
	u, err := Parse(v4)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.String(); got != v4 {
		t.Errorf("String() = %s, want %s", got, v4)
	}
}

func TestVersion(t *testing.T) {
	u, _ := Parse(v4)
	if got := u.Version(); got != 4 {
		t.Errorf("Version() = %d, want 4", got)
	}
}
"""
UUID_STRINGS = UUID + """
// Strings is the canonical form of each UUID.
func (uuids UUIDs) Strings() []string {
	out := make([]string, len(uuids))
	for i, u := range uuids {
		out[i] = u.String()
	}
	return out
}
"""
UUID_BENCH = """
func BenchmarkUUIDs_Strings(b *testing.B) {
	uuid1, err := Parse("f47ac10b-58cc-0372-8567-0e02b2c3d479")
	if err != nil {
		b.Fatal(err)
	}
	uuid2, err := Parse("7d444840-9dc0-11d1-b245-5ffdce74fad2")
	if err != nil {
		b.Fatal(err)
	}
	uuids := UUIDs{uuid1, uuid2}
	for i := 0; i < b.N; i++ {
		uuids.Strings()
	}
}
"""
UUID_CONTAINS = UUID_STRINGS + """
// Contains says whether u is one of the UUIDs.
func (uuids UUIDs) Contains(u UUID) bool {
	for _, v := range uuids {
		if v == u {
			return true
		}
	}
	return false
}
"""
UUID_CONTAINS_STUB = UUID_STRINGS + """
// Contains says whether u is one of the UUIDs.
func (uuids UUIDs) Contains(u UUID) bool { return false }
"""
UUID_CONTAINS_TESTS = """
func TestUUIDsContains(t *testing.T) {
	a, _ := Parse(v4)
	b, _ := Parse("7d444840-9dc0-11d1-b245-5ffdce74fad2")
	if !(UUIDs{a}).Contains(a) {
		t.Errorf("%s does not contain itself", a)
	}
	if got := (UUIDs{a}).Contains(b); got != false {
		t.Errorf("Contains(%s) = %v", b, got)
	}
}

func BenchmarkUUIDs_Contains(b *testing.B) {
	u, _ := Parse(v4)
	uuids := make(UUIDs, 100)
	for i := 0; i < b.N; i++ {
		uuids.Contains(u)
	}
}
"""


def make_uuidish_repo(root: Path) -> dict[str, str]:
    """google/uuid's shape (issue 27): a root package whose commits add a method the tests call, so the base
    with the test patch does not compile and every test of the package fails there. Commits after the
    initial one: ``strings`` (gold adds ``UUIDs.Strings``; the test patch adds only a benchmark of it: no
    test is added or changed) and ``contains`` (gold adds ``UUIDs.Contains``; the test patch adds
    ``TestUUIDsContains`` and a benchmark). Returns {initial, strings, contains: commit id}."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"go.mod": UUID_GO_MOD, "uuid.go": UUID, "uuid_test.go": UUID_TESTS})
    shas = {"initial": _commit(root, "initial import", 1)}
    _write(root, {"uuid.go": UUID_STRINGS, "uuid_test.go": UUID_TESTS + UUID_BENCH})
    shas["strings"] = _commit(root, "Add UUIDs.Strings, the canonical form of each UUID of a slice", 2)
    _write(root, {"uuid.go": UUID_CONTAINS, "uuid_test.go": UUID_TESTS + UUID_BENCH + UUID_CONTAINS_TESTS})
    shas["contains"] = _commit(root, "Add UUIDs.Contains, which says whether a UUID is in the slice", 3)
    return shas
