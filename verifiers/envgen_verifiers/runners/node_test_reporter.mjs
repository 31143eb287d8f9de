// envgen's reporter for Node's built-in test runner (`node --test --test-reporter=<this file>`).
// It runs in the runner's own process, not in the test files' processes, and writes one JSON line per
// finished test: its file, the titles of the suites and tests it is nested in, then its own, and its
// state. A file whose own process failed before any of its tests reported is one "file-error" line.
export default async function* envgenReporter(source) {
  const stacks = new Map();  // file -> titles by nesting, from test:start (a parent starts before its subtests)
  const reported = new Set();  // files with at least one test reported
  const fileFails = new Map();
  for await (const event of source) {
    const data = event.data || {};
    const file = data.file || "";
    if (event.type === "test:start") {
      const stack = stacks.get(file) || [];
      stack.length = data.nesting;
      stack[data.nesting] = data.name;
      stacks.set(file, stack);
      continue;
    }
    if (event.type !== "test:pass" && event.type !== "test:fail") {
      continue;
    }
    const details = data.details || {};
    if (data.nesting === 0 && file && data.name === file) {  // the file's own process
      if (event.type === "test:fail") {
        fileFails.set(file, message(details.error) || "the file failed to run");
      }
      continue;
    }
    if (details.type === "suite") {
      continue;
    }
    const titles = (stacks.get(file) || []).slice(0, data.nesting);
    titles.push(data.name);
    const state = data.skip || data.todo ? "skipped" : event.type === "test:pass" ? "passed" : "failed";
    reported.add(file);
    yield JSON.stringify({ reporter: "envgen-node-test", file, titles, state,
                           message: state === "failed" ? message(details.error) : "" }) + "\n";
  }
  for (const [file, why] of fileFails) {
    if (!reported.has(file)) {
      yield JSON.stringify({ reporter: "envgen-file-error", file, message: why }) + "\n";
    }
  }
}

function message(error) {
  if (!error) {
    return "";
  }
  const cause = error.cause !== undefined ? error.cause : error;
  try {
    return String((cause && (cause.stack || cause.message)) || cause).slice(0, 2000);
  } catch (e) {
    return "a test failed";
  }
}
