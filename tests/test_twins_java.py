"""Java's twin-check dialect (``runners.java.JavaDialect``, Maven and Gradle): which methods are tests in JUnit 4/5,
TestNG and JUnit 3 sources, the plan's renamed tests and twins (compiled with javac where it is installed), which
tests a test patch adds or changes, and how report ids map to a file and a declaration (no Docker, no Maven)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "verifiers"))

from envgen_verifiers import twins  # noqa: E402
from envgen_verifiers.runners.java import JAVA  # noqa: E402
from envgen_verifiers.tests import _diff_lines, dialect  # noqa: E402

JARS = "/usr/share/java"
CLASSPATH = ":".join(f"{JARS}/{j}" for j in ("junit-jupiter-api.jar", "junit-jupiter-params.jar", "opentest4j.jar",
                                             "apiguardian-api.jar", "junit-platform-commons.jar", "junit4.jar",
                                             "hamcrest-core.jar", "testng.jar"))
needs_javac = pytest.mark.skipif(not (shutil.which("javac") and Path(JARS, "junit-jupiter-api.jar").is_file()
                                      and Path(JARS, "testng.jar").is_file()),
                                 reason="needs javac and Debian's junit5, junit4 and testng jars")

CALC = """\
package com.acme.calc;

import java.util.List;

/** What the tests below test. */
public final class Calc {
    public static boolean enabled = true;

    private Calc() {
    }

    public static int add(int a, int b) {
        return a + b;
    }

    public static double mean(List<Integer> xs) {
        return xs.stream().mapToInt(Integer::intValue).average().orElse(0);
    }

    public static String label(String s) {
        return s.trim().toLowerCase();
    }
}
"""

JUNIT5 = """\
package com.acme.calc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.MethodSource;

class CalcTest {
    private static final int BASE = 40;
    private int offset;
    private final Runnable noop = () -> {
        offset = 0;
    };

    @BeforeEach
    void setUp() {
        offset = 2;
    }

    static int twice(int x) {
        return x * 2;
    }

    static Stream<Arguments> labels() {
        return Stream.of(Arguments.of(" A ", "a"), Arguments.of("Bb", "bb"));
    }

    /**
     * Adds two numbers; a {@code brace} in the javadoc: }
     */
    @Test
    @DisplayName("adds two numbers")
    void adds() {
        // a comment with 99 in it and a "string" too
        assertEquals(BASE + offset, Calc.add(40, 2));
    }

    @Test
    void addsTwice() throws Exception {
        assertEquals(twice(3), Calc.add(3, 3), "twice three");
    }

    @ParameterizedTest(name = "{0} + {1} = {2}")
    @CsvSource({
        "1, 2, 3",
        "10, -4, 6",
    })
    void addsRows(int a, int b, int sum) {
        assertEquals(sum, Calc.add(a, b));
    }

    @ParameterizedTest
    @MethodSource("labels")
    void labelsTrimAndLowercase(String in, String out) {
        assertEquals(out, Calc.label(in));
    }

    @Test
    void meanOfAList() {
        char sep = '\\n';
        assertEquals(2.5, Calc.mean(List.of(2, 3)), 1e-9);
        assertEquals("a\\tb", "a\\tb");
        assertTrue(sep == '\\n');
    }

    @Test
    void flagIsOn() {
        assertEquals(true, Calc.enabled);
    }

    @Test
    void rejectsNull() {
        assertThrows(NullPointerException.class, () -> Calc.label(null));
    }

    @Nested
    class Big {
        @Test
        void adds() {
            assertEquals(2000000, Calc.add(1000000, 1000000));
        }

        @Nested
        class Bigger {
            @org.junit.jupiter.api.Test
            void adds() {
                assertEquals(4000000, Calc.add(2000000, 2000000));
            }
        }
    }

    private static final class Helper {
        void notATest() {
            assertEquals(1, 1);
        }
    }
}
"""

JUNIT4 = """\
package com.acme.calc;

import static org.junit.Assert.assertEquals;

import java.util.Arrays;
import java.util.Collection;
import org.junit.Test;
import org.junit.runner.RunWith;
import org.junit.runners.Parameterized;
import org.junit.runners.Parameterized.Parameters;

@RunWith(Parameterized.class)
public class CalcRowsTest {
    @Parameters(name = "{index}: {0}+{1}")
    public static Collection<Object[]> rows() {
        return Arrays.asList(new Object[][] {{1, 2}, {3, 4}});
    }

    private final int a;
    private final int b;

    public CalcRowsTest(int a, int b) {
        this.a = a;
        this.b = b;
    }

    @Test
    public void addsRow() {
        assertEquals(a + b, Calc.add(a, b));
        assertEquals(7, Calc.add(3, 4));
    }

    @Test(expected = ArithmeticException.class)
    public void dividesByZero() {
        int zero = 0;
        System.out.println(10 / zero);
    }

    @Test(timeout = 1000) public void oneLine() { assertEquals("x", Calc.label(" X ")); }
}
"""

TESTNG = """\
package com.acme.calc;

import static org.testng.Assert.assertEquals;

import org.testng.annotations.DataProvider;
import org.testng.annotations.Test;

@Test
public class CalcNgTest {
    @DataProvider(name = "sums")
    public Object[][] sums() {
        return new Object[][] {{1, 2, 3}, {5, 5, 10}};
    }

    @Test(dataProvider = "sums")
    public void addsProvided(int a, int b, int sum) {
        assertEquals(Calc.add(a, b), sum);
    }

    public void addsByClassAnnotation() {
        assertEquals(Calc.add(2, 2), 4);
    }

    private void helper() {
        assertEquals(1, 1);
    }
}
"""

JUNIT3 = """\
package com.acme.calc;

import junit.framework.TestCase;

public class CalcLegacyTest extends TestCase {
    public void testAdds() {
        assertEquals(5, Calc.add(2, 3));
    }

    public void helperNotATest(int x) {
        assertEquals(x, x);
    }

    protected void setUp() throws Exception {
        super.setUp();
    }
}
"""

FILES = {"src/test/java/com/acme/calc/CalcTest.java": JUNIT5,
         "src/test/java/com/acme/calc/CalcRowsTest.java": JUNIT4,
         "src/test/java/com/acme/calc/CalcNgTest.java": TESTNG,
         "src/test/java/com/acme/calc/CalcLegacyTest.java": JUNIT3}
RUN_FILES = sorted(FILES)


def _names(text: str) -> list[str]:
    return [d.name for d in JAVA.declarations(text)]


def test_maven_and_gradle_have_the_java_dialect():
    assert dialect("maven") is JAVA and dialect("gradle") is JAVA


def test_declarations_are_annotated_test_methods_from_their_javadoc_to_their_closing_brace():
    assert _names(JUNIT5) == ["CalcTest.adds", "CalcTest.addsTwice", "CalcTest.addsRows",
                              "CalcTest.labelsTrimAndLowercase", "CalcTest.meanOfAList", "CalcTest.flagIsOn",
                              "CalcTest.rejectsNull", "CalcTest$Big.adds", "CalcTest$Big$Bigger.adds"]
    adds = JAVA.declarations(JUNIT5)[0]
    assert JUNIT5[adds.start:].startswith("    /**\n     * Adds two numbers")
    assert JUNIT5[:adds.end].endswith("Calc.add(40, 2));\n    }") and JUNIT5[:adds.name_end].endswith("void adds")
    rows = JAVA.declarations(JUNIT5)[2]
    assert JUNIT5[rows.start:].startswith('    @ParameterizedTest(name = "{0} + {1} = {2}")\n    @CsvSource({')
    assert _names(JUNIT4) == ["CalcRowsTest.addsRow", "CalcRowsTest.dividesByZero", "CalcRowsTest.oneLine"]
    one = JAVA.declarations(JUNIT4)[2]
    assert JUNIT4[one.start:one.end] == '    @Test(timeout = 1000) public void oneLine() { assertEquals("x", Calc.label(" X ")); }'
    # TestNG: annotated methods, and the public void methods of a class @Test annotates (not its data providers)
    assert _names(TESTNG) == ["CalcNgTest.addsProvided", "CalcNgTest.addsByClassAnnotation"]
    assert _names(JUNIT3) == ["CalcLegacyTest.testAdds"]  # a TestCase's public void testX()


@pytest.mark.parametrize("test_id, expected", [
    ("com.acme.calc.CalcTest.adds", ("src/test/java/com/acme/calc/CalcTest.java", "CalcTest.adds")),
    ("com.acme.calc.CalcTest$Big$Bigger.adds", ("src/test/java/com/acme/calc/CalcTest.java", "CalcTest$Big$Bigger.adds")),
    ("com.acme.calc.CalcTest.addsRows{int, int, int}[2]", ("src/test/java/com/acme/calc/CalcTest.java",
                                                           "CalcTest.addsRows")),  # Surefire's JUnit 5
    ("com.acme.calc.CalcTest.addsRows(int, int, int)[1]", ("src/test/java/com/acme/calc/CalcTest.java",
                                                           "CalcTest.addsRows")),  # Gradle's JUnit 5
    ("com.acme.calc.CalcRowsTest.addsRow[1: 3.5+4]", ("src/test/java/com/acme/calc/CalcRowsTest.java",
                                                      "CalcRowsTest.addsRow")),  # JUnit 4 Parameterized
    ("com.acme.calc.CalcNgTest.addsProvided", ("src/test/java/com/acme/calc/CalcNgTest.java", "CalcNgTest.addsProvided")),
    ("com.acme.calc.CalcTest.adds two numbers", None),  # a display name names no method
    ("com.acme.other.MissingTest.adds", None),
])
def test_target_maps_report_ids_to_the_run_file_and_the_declaration(test_id, expected):
    assert JAVA.target(test_id, RUN_FILES, "") == expected


def _write(tmp_path: Path, files: dict) -> None:
    for p, t in files.items():
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_text(t)


def _plan(tmp_path: Path, ids: list[str], seed: int = 5) -> dict:
    _write(tmp_path, {**FILES, "src/main/java/com/acme/calc/Calc.java": CALC})
    return twins.plan(str(tmp_path), JAVA, ids, RUN_FILES, seed=seed)


IDS = ["com.acme.calc.CalcTest.adds", "com.acme.calc.CalcTest.addsRows{int, int, int}[1]",
       "com.acme.calc.CalcTest.addsRows{int, int, int}[2]", "com.acme.calc.CalcTest$Big$Bigger.adds",
       "com.acme.calc.CalcTest.meanOfAList", "com.acme.calc.CalcTest.rejectsNull",
       "com.acme.calc.CalcRowsTest.addsRow[1: 1+2]", "com.acme.calc.CalcNgTest.addsProvided",
       "com.acme.calc.CalcNgTest.addsByClassAnnotation", "com.acme.calc.CalcLegacyTest.testAdds"]


def test_a_plan_renames_the_tests_and_writes_twins_that_differ_by_one_literal(tmp_path):
    plan = _plan(tmp_path, IDS)
    # six tests at most, file by file; rejectsNull and addsProvided (its data come from a provider) have no
    # literal a twin could change
    assert [t["name"] for t in plan["tests"]] == ["CalcLegacyTest.testAdds", "CalcNgTest.addsByClassAnnotation",
                                                  "CalcRowsTest.addsRow", "CalcTest$Big$Bigger.adds", "CalcTest.adds",
                                                  "CalcTest.addsRows"]
    assert "void addsProvided(int a" in plan["files"]["src/test/java/com/acme/calc/CalcNgTest.java"]
    assert all(re.fullmatch(r"_[a-z0-9]{5}", s) for s in plan["real"] + plan["twins"])
    text = plan["files"]["src/test/java/com/acme/calc/CalcTest.java"]
    assert "void adds() {\n        // a comment" not in text and "void addsRows(" not in text
    assert "void rejectsNull()" in text and "class Big {\n        @Test\n        void adds() {" in text
    real = plan["tests"][4]["real"]
    assert f"void adds{real}()" in text and text.count("Adds two numbers") == 3  # the javadoc goes with each copy
    # every twin changes the same literal, on the assertion line first (assertEquals(expected, actual): its
    # first), each to another value
    adds = re.findall(r"assertEquals\(BASE \+ offset, Calc\.add\((\d+), 2\)\);", text)
    assert len(adds) == 3 and len(set(adds)) == 3 and "40" in adds
    assert "a comment with 99" in text and "a comment with 100" not in text
    # a @CsvSource table's numbers (its rows are strings); not the display name's
    rows = re.findall(r'"(\d+), 2, 3",', text)
    assert len(rows) == 3 and len(set(rows)) == 3 and "1" in rows
    assert text.count('@ParameterizedTest(name = "{0} + {1} = {2}")') == 3
    assert plan == _plan(tmp_path, IDS)  # seeded: the same plan at every validation


def test_escapes_and_char_literals_are_never_edited(tmp_path):
    """A bumped ``'\\n'`` would not compile."""
    plan = _plan(tmp_path, ["com.acme.calc.CalcTest.meanOfAList"])
    text = plan["files"]["src/test/java/com/acme/calc/CalcTest.java"]
    assert text.count("char sep = '\\n';") == 3 and text.count('assertEquals("a\\tb", "a\\tb");') == 3
    assert text.count("assertEquals(2.5, Calc.mean(List.of(2, 3)), 1e-9);") == 1


@needs_javac
def test_the_planned_sources_compile(tmp_path):
    plan = _plan(tmp_path, IDS)
    twins.write(str(tmp_path), plan)
    srcs = [str(tmp_path / "src/main/java/com/acme/calc/Calc.java")] + [str(tmp_path / p) for p in RUN_FILES]
    out = subprocess.run(["javac", "-nowarn", "-d", str(tmp_path / "classes"), "-cp", CLASSPATH, *srcs],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    classes = {p.name for p in (tmp_path / "classes/com/acme/calc").iterdir()}
    assert {"CalcTest.class", "CalcTest$Big$Bigger.class", "CalcRowsTest.class", "CalcNgTest.class"} <= classes


def _changed(before: str, after: str, tmp_path: Path) -> list[str]:
    (tmp_path / "a").write_text(before)
    (tmp_path / "b").write_text(after)
    diff = subprocess.run(["git", "diff", "--no-index", "a", "b"], cwd=tmp_path, capture_output=True, text=True).stdout
    if not diff:
        return []
    lines = next(iter(_diff_lines(diff).values()))
    return JAVA.changed(after, lines["added"], lines["removed"])


def test_a_test_patch_changes_the_tests_it_adds_or_edits(tmp_path):
    added = JUNIT5.replace("    @Nested\n", "    @Test\n    void addsZero() {\n        assertEquals(0, Calc.add(0, 0));"
                                            "\n    }\n\n    @Nested\n", 1)
    assert _changed(JUNIT5, added, tmp_path) == ["CalcTest.addsZero"]
    assert _changed(JUNIT5, JUNIT5.replace("Calc.add(2000000, 2000000)", "Calc.add(2000000, 2000001)"),
                    tmp_path) == ["CalcTest$Big$Bigger.adds"]
    # an annotation's table is the test's
    assert _changed(JUNIT5, JUNIT5.replace('"10, -4, 6",', '"10, -4, 6",\n        "0, 0, 0",'),
                    tmp_path) == ["CalcTest.addsRows"]


def test_helpers_providers_and_set_up_change_the_tests_that_use_them(tmp_path):
    assert _changed(JUNIT5, JUNIT5.replace("return x * 2;", "return x + x;"), tmp_path) == ["CalcTest.addsTwice"]
    # a data provider named in an annotation
    assert _changed(JUNIT5, JUNIT5.replace('Arguments.of("Bb", "bb")', 'Arguments.of("Bb", "bb"), Arguments.of("C", "c")'),
                    tmp_path) == ["CalcTest.labelsTrimAndLowercase"]
    # a constant
    assert _changed(JUNIT5, JUNIT5.replace("BASE = 40;", "BASE = 39;"), tmp_path) == ["CalcTest.adds"]
    # set-up: every test of its class (and of the classes nested in it)
    assert len(_changed(JUNIT5, JUNIT5.replace("offset = 2;", "offset = 2; // two\n        offset += 0;"),
                        tmp_path)) == 9
    assert _changed(TESTNG, TESTNG.replace("{5, 5, 10}", "{5, 5, 10}, {0, 1, 1}"), tmp_path) == ["CalcNgTest.addsProvided"]


def test_imports_comments_helpers_nobody_uses_and_benchmarks_change_no_test(tmp_path):
    assert _changed(JUNIT5, JUNIT5.replace("import java.util.List;\n", "import java.util.List;\nimport java.util.Map;\n"),
                    tmp_path) == []
    assert _changed(JUNIT5, JUNIT5.replace("        offset = 2;\n", "        // why two\n        offset = 2;\n"),
                    tmp_path) == []
    unused = JUNIT5.replace("    static int twice", "    static int thrice(int x) {\n        return x * 3;\n    }\n\n"
                                                   "    static int twice")
    assert _changed(JUNIT5, unused, tmp_path) == []
    bench = JUNIT5.replace("    private static final class Helper {",
                           "    public static void main(String[] args) {\n        for (int i = 0; i < 1000; i++) {\n"
                           "            Calc.add(i, i);\n        }\n    }\n\n    private static final class Helper {")
    assert _changed(JUNIT5, bench, tmp_path) == []
    assert _changed(JUNIT5, JUNIT5.replace("assertEquals(1, 1);", "assertEquals(2, 2);"), tmp_path) == []
