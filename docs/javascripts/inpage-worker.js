/*
 * The Web Worker of the in-page runs: Pyodide and the engine, off the page's thread.
 *
 * Scope: load the self-hosted runtime (assets/inpage/pyodide/) and unzip the engine's files
 * (assets/inpage/engine.zip) into its file system, once per worker; then, per message, write the reader's
 * edits over the shipped files and run a toy command or an example through site_scripts/inpage/inpage_worker.py,
 * posting each printed line as it comes. Non-scope: stopping (the page terminates this worker and starts a
 * new one) and anything shown on the page (inpage-run.js).
 *
 * Messages in:  {type: "read", id, base, path} | {type: "run", id, base, kind, value, table, edits}
 *               | {type: "exercise", id, base, lesson, lang, which} (a workbook starter or solution)
 *               | {type: "check", id, base, lesson, lang, source} (a workbook check of the reader's code)
 * Messages out: {type: "ready", id, files, loadMs} | {type: "file", id, path, text} (also for "exercise")
 *               | {type: "line", id, stream, text} | {type: "done", id, code, table, edited}
 *               | {type: "failed", id, message}
 */
"use strict";

const ENGINE_ROOT = "/home/pyodide/inpage";
let loading = null; // the promise of {pyodide, py, files}
let current = 0; // the id of the message whose output is being printed

function post(message) {
  self.postMessage(message);
}

async function load(base, id) {
  const started = performance.now();
  importScripts(base + "pyodide/pyodide.js");
  const pyodide = await self.loadPyodide({ indexURL: base + "pyodide/" });
  const zip = await fetch(base + "engine.zip");
  if (!zip.ok) throw new Error("engine.zip: HTTP " + zip.status);
  pyodide.unpackArchive(await zip.arrayBuffer(), "zip", { extractDir: ENGINE_ROOT });
  pyodide.runPython(
    "import sys\nsys.dont_write_bytecode = True\nsys.path.insert(0, " + JSON.stringify(ENGINE_ROOT) + ")"
  );
  pyodide.setStdout({ batched: (text) => post({ type: "line", id: current, stream: "stdout", text }) });
  pyodide.setStderr({ batched: (text) => post({ type: "line", id: current, stream: "stderr", text }) });
  const py = pyodide.pyimport("site_scripts.inpage.inpage_worker");
  const files = JSON.parse(py.load_originals(ENGINE_ROOT));
  post({ type: "ready", id, files, loadMs: Math.round(performance.now() - started) });
  return { pyodide, py, files };
}

async function run(message, py) {
  current = message.id;
  const edited = py.apply_edits(JSON.stringify(message.edits || {})).toJs();
  const result =
    message.kind === "command"
      ? py.run_command(message.value, message.table || "", message.command || "mini_deepinfer")
      : message.kind === "session"
        ? py.run_example(message.value)
        : py.run_script(message.value);
  const { code, table } = JSON.parse(result);
  post({ type: "done", id: message.id, code, table, edited });
}

self.onmessage = async (event) => {
  const message = event.data;
  try {
    loading = loading || load(message.base, message.id);
    const { py } = await loading;
    if (message.type === "read") {
      post({ type: "file", id: message.id, path: message.path, text: py.original(message.path) });
    } else if (message.type === "run") {
      await run(message, py);
    } else if (message.type === "exercise") {
      post({ type: "file", id: message.id, text: py.exercise_text(message.lesson, message.lang, message.which) });
    } else if (message.type === "check") {
      current = message.id;
      py.apply_edits("{}"); // the engine's own files: a check changes only the reader's function
      const { code } = JSON.parse(py.check_exercise(message.lesson, message.source, message.lang));
      post({ type: "done", id: message.id, code, table: null, edited: [] });
    }
  } catch (error) {
    post({ type: "failed", id: message.id, message: String(error && error.message ? error.message : error) });
  }
};
