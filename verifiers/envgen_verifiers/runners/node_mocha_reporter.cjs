// envgen's mocha reporter (part of the verifier kit, outside the repository under test): one JSON record
// per test with its title path (describe blocks, then the test), so ids keep the suite boundaries that
// mocha's own json reporter joins with spaces. Written with --reporter-option output=FILE at the end of
// the run; failing hooks are reported as the hook's own entry.
"use strict";
const fs = require("fs");
const path = require("path");

function record(test, state, err) {
  const titles = typeof test.titlePath === "function" ? test.titlePath() : [test.fullTitle()];
  const out = { file: test.file || (test.parent && test.parent.file) || "", titles: titles, state: state };
  if (err) {
    out.message = String((err && (err.message || err)) || "").slice(0, 2000);
  }
  return out;
}

function EnvgenReporter(runner, options) {
  const tests = [];
  const output = ((options && options.reporterOptions) || {}).output;
  runner.on("pass", (t) => tests.push(record(t, "passed")));
  runner.on("fail", (t, err) => tests.push(record(t, t.type === "hook" ? "error" : "failed", err)));
  runner.on("pending", (t) => tests.push(record(t, "skipped")));
  runner.once("end", () => {
    const text = JSON.stringify({ reporter: "envgen-mocha", tests: tests }) + "\n";
    if (output) {
      fs.mkdirSync(path.dirname(output), { recursive: true });
      fs.writeFileSync(output, text);
    } else {
      process.stdout.write(text);
    }
  });
}

module.exports = EnvgenReporter;
