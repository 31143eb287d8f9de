"""A small real Maven project for the Java tests: ``slugs`` (JUnit 5, dependencies from Debian's Maven repository).

Commits after the initial one, each a candidate:

- fix-digits: ``Slug.of`` dropped digits ("Top 10 Tips" gave "top-tips"); the fix and its test
  ``keepsDigits`` (FAIL_TO_PASS), the other tests of ``SlugTest`` (plain, parameterised, nested,
  non-ASCII) pass before and after (PASS_TO_PASS);
- words: adds ``Words.count`` and a new test class ``WordsTest`` (it does not compile at the base
  commit: its tests are missing there, hence failing);
- readme: documentation only (filtered).

The project has what real Maven projects have: a pom.xml with compiler settings and test dependency,
a test resource (junit-platform.properties), a ``.mvn/maven.config``, ``.gitignore`` for ``target/``.
Dates and identities are fixed, so commit ids are the same on every machine.
"""

from __future__ import annotations

import gzip
from pathlib import Path

try:
    from .code_repo import _commit, _git, _write
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import _commit, _git, _write

POM = """\
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>com.acme</groupId>
  <artifactId>slugs</artifactId>
  <version>1.0.0-SNAPSHOT</version>
  <name>slugs</name>

  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
    <junit.version>5.9.2</junit.version>
  </properties>

  <dependencies>
    <dependency>
      <groupId>org.junit.jupiter</groupId>
      <artifactId>junit-jupiter</artifactId>
      <version>${junit.version}</version>
      <scope>test</scope>
    </dependency>
  </dependencies>
</project>
"""

SLUG = """\
package com.acme.text;

import java.text.Normalizer;
import java.util.Locale;

/** URL slugs of titles: lower case ASCII words joined by dashes. */
public final class Slug {
    private Slug() {
    }

    public static String of(String title) {
        String plain = Normalizer.normalize(title, Normalizer.Form.NFD).replaceAll("\\\\p{M}", "");
        String dashed = plain.toLowerCase(Locale.ROOT).replaceAll("[^a-z]+", "-");
        return dashed.replaceAll("^-+|-+$", "");
    }
}
"""

SLUG_TEST = """\
package com.acme.text;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class SlugTest {
    @Test
    void lowercasesWords() {
        assertEquals("hello-world", Slug.of("Hello World"));
    }

    @Test
    void stripsAccents() {
        assertEquals("creme-brulee", Slug.of("Crème Brûlée"));
    }

    @ParameterizedTest
    @ValueSource(strings = {"  padded  ", "--padded--", "padded!"})
    void trimsSeparators(String title) {
        assertEquals("padded", Slug.of(title));
    }

    @Nested
    class Punctuation {
        @Test
        void collapsesRuns() {
            assertEquals("a-b", Slug.of("a -- b"));
        }
    }
}
"""

KEEPS_DIGITS = """
    @Test
    void keepsDigits() {
        assertEquals("top-10-tips", Slug.of("Top 10 Tips"));
    }
}
"""

WORDS = """\
package com.acme.text;

/** Word counts of titles. */
public final class Words {
    private Words() {
    }

    public static int count(String title) {
        String slug = Slug.of(title);
        return slug.isEmpty() ? 0 : slug.split("-").length;
    }
}
"""

WORDS_TEST = """\
package com.acme.text;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class WordsTest {
    @Test
    void countsWords() {
        assertEquals(3, Words.count("Top 10 Tips"));
    }

    @Test
    void emptyTitleHasNoWords() {
        assertEquals(0, Words.count(" ?! "));
    }
}
"""

FIX_MSG = """Keep digits in slugs (fixes #3)

Slug.of("Top 10 Tips") gave "top-tips": every character outside a-z was a
separator, so numbers vanished from the URLs of numbered articles."""

WORDS_MSG = "Add Words.count, the number of words of a title's slug"
README_MSG = "Describe the project and how to run its tests with Maven"


SLUG_PATH = "src/main/java/com/acme/text/Slug.java"
SLUG_TEST_PATH = "src/test/java/com/acme/text/SlugTest.java"
WORDS_TEST_PATH = "src/test/java/com/acme/text/WordsTest.java"


UNPACKAGED_DEPENDENCY = """\
    <dependency>
      <groupId>org.example.unpackaged</groupId>
      <artifactId>nowhere</artifactId>
      <version>1.2</version>
    </dependency>
  </dependencies>"""
"""A dependency no Debian package has (what real POMs need: 7/7 did not compile offline)."""


DEBIAN_VERSIONS_POM = POM.replace("""  <name>slugs</name>""", """  <name>slugs</name>
  <parent>
    <groupId>org.apache</groupId>
    <artifactId>apache</artifactId>
    <version>33</version>
  </parent>""").replace("<junit.version>5.9.2</junit.version>", "<junit.version>5.10.2</junit.version>").replace(
    """  </dependencies>""", """    <dependency>
      <groupId>org.junit.jupiter</groupId>
      <artifactId>junit-jupiter-api</artifactId>
      <scope>test</scope>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.rat</groupId>
        <artifactId>apache-rat-plugin</artifactId>
        <executions>
          <execution>
            <phase>validate</phase>
            <goals><goal>check</goal></goals>
          </execution>
        </executions>
      </plugin>
    </plugins>
  </build>""")
"""The real failure shape (commons-codec, commons-cli): versions Debian does not package. The parent
``org.apache:apache:33`` (Debian has 29), JUnit 5.10.2 (Debian has 5.9.2), a dependency whose version only
the parent manages (``junit-jupiter-api``: Apache's parent does not, the stand-in's management does) and a
plugin with no version that no Debian package ships, bound to ``validate`` (Apache RAT, as commons-parent
binds it): Debian's versions stand in and the plugin is ignored."""

DEBIAN_CONTENTS = """\
usr/share/maven-repo/junit/junit/3.8.2/junit-3.8.2.jar  java/junit
usr/share/maven-repo/junit/junit/3.8.2/junit-3.8.2.pom  java/junit
usr/share/maven-repo/junit/junit/3.x/junit-3.x.jar      java/junit
usr/share/maven-repo/junit/junit/3.x/junit-3.x.pom      java/junit
usr/share/maven-repo/junit/junit/4.13.2/junit-4.13.2.jar java/junit4
usr/share/maven-repo/junit/junit/4.13.2/junit-4.13.2.pom java/junit4
usr/share/maven-repo/junit/junit/4.x/junit-4.x.jar      java/junit4
usr/share/maven-repo/junit/junit/4.x/junit-4.x.pom      java/junit4
usr/share/maven-repo/org/apache/apache/18/apache-18.pom java/libapache-pom-java
usr/share/maven-repo/org/apache/apache/29/apache-29.pom java/libapache-pom-java
usr/share/maven-repo/org/apache/apache/debian/apache-debian.pom java/libapache-pom-java
usr/share/maven-repo/org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.jar java/libcommons-lang3-java
usr/share/maven-repo/org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.pom java/libcommons-lang3-java
usr/share/maven-repo/org/apache/commons/commons-lang3/3.x/commons-lang3-3.x.pom java/libcommons-lang3-java
usr/share/maven-repo/org/apache/commons/commons-lang3/debian/commons-lang3-debian.jar java/libcommons-lang3-java
usr/share/maven-repo/org/apache/commons/commons-lang3/debian/commons-lang3-debian.pom java/libcommons-lang3-java
usr/share/maven-repo/org/apache/commons/commons-parent/56/commons-parent-56-site.xml java/libcommons-parent-java
usr/share/maven-repo/org/apache/commons/commons-parent/56/commons-parent-56.pom java/libcommons-parent-java
usr/share/maven-repo/org/apache/commons/commons-parent/debian/commons-parent-debian-site.xml java/libcommons-parent-java
usr/share/maven-repo/org/apache/commons/commons-parent/debian/commons-parent-debian.pom java/libcommons-parent-java
usr/share/maven-repo/org/apache/maven/plugins/maven-surefire-plugin/2.12.4/maven-surefire-plugin-2.12.4.pom java/libsurefire-java
usr/share/maven-repo/org/apache/maven/plugins/maven-surefire-plugin/2.17/maven-surefire-plugin-2.17.pom java/libsurefire-java
usr/share/maven-repo/org/apache/maven/plugins/maven-surefire-plugin/2.22.3/maven-surefire-plugin-2.22.3.jar java/libsurefire-java
usr/share/maven-repo/org/apache/maven/plugins/maven-surefire-plugin/2.22.3/maven-surefire-plugin-2.22.3.pom java/libsurefire-java
usr/share/maven-repo/org/hamcrest/hamcrest/2.2/hamcrest-2.2.jar java/libhamcrest-java
usr/share/maven-repo/org/hamcrest/hamcrest/2.2/hamcrest-2.2.pom java/libhamcrest-java
usr/share/maven-repo/org/hamcrest/hamcrest/debian/hamcrest-debian.jar java/libhamcrest-java
usr/share/maven-repo/org/hamcrest/hamcrest/debian/hamcrest-debian.pom java/libhamcrest-java
usr/share/maven-repo/org/junit/junit-bom/5.9.2/junit-bom-5.9.2.pom java/junit5
usr/share/maven-repo/org/junit/junit-bom/debian/junit-bom-debian.pom java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter-api/5.9.2/junit-jupiter-api-5.9.2.jar java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter-api/5.9.2/junit-jupiter-api-5.9.2.pom java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter-api/debian/junit-jupiter-api-debian.jar java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter-api/debian/junit-jupiter-api-debian.pom java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter-engine/5.9.2/junit-jupiter-engine-5.9.2.jar java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter-engine/5.9.2/junit-jupiter-engine-5.9.2.pom java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter-engine/debian/junit-jupiter-engine-debian.jar java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter-engine/debian/junit-jupiter-engine-debian.pom java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter-params/5.9.2/junit-jupiter-params-5.9.2.jar java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter-params/5.9.2/junit-jupiter-params-5.9.2.pom java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter-params/debian/junit-jupiter-params-debian.jar java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter-params/debian/junit-jupiter-params-debian.pom java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter/5.9.2/junit-jupiter-5.9.2.jar java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter/5.9.2/junit-jupiter-5.9.2.pom java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter/debian/junit-jupiter-debian.jar java/junit5
usr/share/maven-repo/org/junit/jupiter/junit-jupiter/debian/junit-jupiter-debian.pom java/junit5
"""
"""Lines of Debian bookworm's Contents-all index (real ones) for the artifacts the Java tests name: the
packages the jdk layer installs (junit4, junit5, libsurefire-java), Apache's parent (libapache-pom-java,
installed with Maven), and commons-parent/commons-lang3, which it does not."""


def debian_contents(path: Path) -> Path:
    """Write ``DEBIAN_CONTENTS`` gzipped at ``path`` (what ENVGEN_DEBIAN_CONTENTS names in the tests)."""
    path.write_bytes(gzip.compress(DEBIAN_CONTENTS.encode()))
    return path


def make_slugs_repo(root: Path, *, upto: str = "readme", unpackaged: bool = False,
                    debian_versions: bool = False) -> dict[str, str]:
    """Create the repository at ``root``; return {"initial", "fix", "words", "readme": sha}, stopping after the
    commit ``upto`` names (the Docker test builds the fix alone). ``unpackaged``: the POM also depends on
    ``org.example.unpackaged:nowhere:1.2``, which Debian's Maven repository does not have. ``debian_versions``:
    the POM is ``DEBIAN_VERSIONS_POM`` (versions Debian does not package)."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    pom = DEBIAN_VERSIONS_POM if debian_versions else POM
    pom = pom.replace("  </dependencies>", UNPACKAGED_DEPENDENCY) if unpackaged else pom
    _write(root, {"pom.xml": pom, SLUG_PATH: SLUG, SLUG_TEST_PATH: SLUG_TEST, ".gitignore": "target/\n",
                  ".mvn/maven.config": "-ntp\n",
                  "src/test/resources/junit-platform.properties": "junit.jupiter.testinstance.lifecycle.default = per_method\n",
                  "README.md": "# slugs\n"})
    shas = {"initial": _commit(root, "Slugs of titles: lower case ASCII words joined by dashes", 1)}

    _write(root, {SLUG_PATH: SLUG.replace('"[^a-z]+"', '"[^a-z0-9]+"'),
                  SLUG_TEST_PATH: SLUG_TEST.rstrip()[:-1].rstrip() + "\n" + KEEPS_DIGITS})
    shas["fix"] = _commit(root, FIX_MSG, 2)
    if upto == "fix":
        return shas

    _write(root, {"src/main/java/com/acme/text/Words.java": WORDS, WORDS_TEST_PATH: WORDS_TEST})
    shas["words"] = _commit(root, WORDS_MSG, 3)

    _write(root, {"README.md": "# slugs\n\nURL slugs of titles. Run the tests with `mvn test`.\n"})
    shas["readme"] = _commit(root, README_MSG, 4)
    return shas


def diff(root: Path, base: str, head: str) -> str:
    return _git(root, "diff", "--binary", "--full-index", base, head) + "\n"


# ---------------------------------------------------------------- slugs-gradle: the same fix in a Gradle build

BUILD_GRADLE = """\
apply plugin: 'java'

repositories {
    mavenCentral()
}

dependencies {
    testCompile 'junit:junit:4.13.2'
}

tasks.withType(JavaCompile) {
    options.encoding = 'UTF-8'
}
"""

GRADLE_SLUG_TEST = """\
package com.acme.text;

import static org.junit.Assert.assertEquals;

import org.junit.Test;

public class SlugTest {
    @Test
    public void lowercasesWords() {
        assertEquals("hello-world", Slug.of("Hello World"));
    }

    @Test
    public void stripsAccents() {
        assertEquals("creme-brulee", Slug.of("Crème Brûlée"));
    }
}
"""

GRADLE_KEEPS_DIGITS = """
    @Test
    public void keepsDigits() {
        assertEquals("top-10-tips", Slug.of("Top 10 Tips"));
    }
}
"""


def make_gradle_slugs_repo(root: Path) -> dict[str, str]:
    """A Gradle (Groovy DSL, JUnit 4, ``mavenCentral()`` as real builds name it) version of ``slugs``: the
    initial commit and the fix; return {"initial", "fix": sha}."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"build.gradle": BUILD_GRADLE, "settings.gradle": "rootProject.name = 'slugs'\n",
                  SLUG_PATH: SLUG, SLUG_TEST_PATH: GRADLE_SLUG_TEST, ".gitignore": "build/\n.gradle/\n"})
    shas = {"initial": _commit(root, "Slugs of titles, built with Gradle", 1)}
    _write(root, {SLUG_PATH: SLUG.replace('"[^a-z]+"', '"[^a-z0-9]+"'),
                  SLUG_TEST_PATH: GRADLE_SLUG_TEST.rstrip()[:-1].rstrip() + "\n" + GRADLE_KEEPS_DIGITS})
    shas["fix"] = _commit(root, FIX_MSG, 2)
    return shas
