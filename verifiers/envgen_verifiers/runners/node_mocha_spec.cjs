// envgen (verifier kit): preloaded into mocha (NODE_OPTIONS=--require) so the run loads exactly the files
// named in ENVGEN_MOCHA_SPEC (JSON list), whatever `spec` the project's .mocharc or package.json adds:
// mocha concatenates a configuration's spec with the command line's.
"use strict";
const Module = require("module");
const path = require("path");
const files = JSON.parse(process.env.ENVGEN_MOCHA_SPEC || "[]");
const load = Module._load;
const done = new Set();
Module._load = function (request, parent, isMain) {
  const exported = load.apply(this, arguments);
  if (files.length && exported && typeof exported.loadOptions === "function" && !done.has(exported)) {
    let file = "";
    try {
      file = Module._resolveFilename(request, parent, isMain);
    } catch (e) {
      file = "";
    }
    if (file.split(path.sep).slice(-3).join("/") === "lib/cli/options.js") {
      const original = exported.loadOptions;
      exported.loadOptions = function (argv) {
        const args = original.apply(this, arguments);
        args._ = files.slice();
        delete args.spec;
        return args;
      };
      done.add(exported);
    }
  }
  return exported;
};
