/*
 * Run buttons for the toy commands and core-only examples of the pages, in the reader's browser.
 *
 * Scope: site_scripts/inpage/inpage_hooks.py leaves a hidden <div class="inpage-run"> after each toy command
 * (data-inpage-kind="command", its flags in data-inpage-value) and each core-only example ("session" for a
 * pycon block, "script" for a python one, its code in data-inpage-value). This script turns each into a
 * small terminal: editable flags or code, Run and Stop, the output as it prints, and an editor for the
 * engine's own files (the lessons' exercises), whose edits live in this browser's localStorage until Reset.
 * Python runs in a Web Worker (inpage-worker.js) that loads the self-hosted Pyodide on the first click, not
 * with the page; Stop ends the worker (so a `while True: pass` ends too) and the next run starts a new one.
 * A build without the runtime (data-inpage-runtime="no") gets a note saying how to run the command locally.
 * Non-scope: what a run prints (site_scripts/inpage/inpage_worker.py).
 *
 * Each widget records data-inpage-state (idle, loading, running, done, stopped, failed) and, after a run,
 * data-inpage-first-ms and data-inpage-run-ms (click to first output line, click to the end), which the
 * browser tests and site_scripts/inpage/inpage_measure.py read.
 */
(function () {
  "use strict";

  const script = document.currentScript;
  if (!script || !window.Worker) return;
  const BASE = new URL("../assets/inpage/", script.src).href;
  const WORKER = new URL("inpage-worker.js", script.src).href;
  const EDIT_KEY = "mini-deepinfer.inpage.edit:";
  const command = (box) => "python -m " + (box.dataset.inpageCommand || "mini_deepinfer");

  const TEXT = {
    zh: {
      run: "在页面里运行",
      flags: "参数：",
      flagsPlaceholder: "可以在这里加参数，例如 --help",
      loadingFile: "正在加载 Python 运行时，加载完就显示这个文件（只有第一次要等几秒）……",
      stop: "停止",
      resetCode: "还原示例",
      files: "在页面里改引擎的文件：",
      choose: "（选一个文件）",
      edited: "（已改）",
      resetFile: "还原这个文件",
      loading: "正在加载 Python 运行时（只有第一次运行需要）……",
      running: "运行中……",
      done: "结束，退出码 {code}；点击后 {first} 毫秒出现第一行输出，全程 {total} 毫秒。",
      stopped: "已停止。",
      failed: "运行时出错：{message}",
      usedEdits: "这次运行用了你在页面里改过的文件：{files}。",
      noRuntime: "这个构建没有带页面内的 Python 运行时。在仓库根目录运行：",
      noRuntimeExample: "这个构建没有带页面内的 Python 运行时。在仓库根目录的 Python 里运行这段代码。",
      rounds: "这次运行的逐轮表（由这次运行的 trace 事件生成）",
      inFlight: "这次运行每一步发出、读回的轮次，以及之后仍在途的轮次",
      inFlightHead: ["轮", "发出", "读回", "之后在途的轮次"],
      check: "检查",
      resetExercise: "重置",
      showSolution: "看答案",
      hideSolution: "收起答案",
      confirmReset: "把你写的代码换回起步代码吗？你写的内容会丢失。",
      checking: "正在检查……",
      checked: "检查结束，退出码 {code}（0 为全部通过）；点击后 {total} 毫秒，打开页面后 {sinceOpen} 毫秒。",
      kept: "你写的代码保存在这个浏览器里，刷新也不会丢。",
      solutionNote: "引擎自己的函数（python -m mini_deepinfer.workbook solution {lesson} 打印的就是它）：",
      noRuntimeExercise: "这个构建没有带页面内的 Python 运行时。在仓库根目录运行：",
      abcRounds: "这次运行的逐轮表（由这次运行的 trace 事件和每轮结束时的槽位池生成）",
      abcHead: ["轮", "算什么（请求 阶段 位置）", "token 数", "提交", "结束与归还", "之后的 KV 空闲, 未预留",
        "之后的状态槽位空闲", "还在排队"],
    },
    en: {
      run: "Run in the page",
      flags: "Flags:",
      flagsPlaceholder: "add flags here, e.g. --help",
      loadingFile: "Loading the Python runtime; the file shows once it has loaded (a few seconds, the first time only)…",
      stop: "Stop",
      resetCode: "Reset the example",
      files: "Edit an engine file in the page:",
      choose: "(choose a file)",
      edited: " (edited)",
      resetFile: "Reset this file",
      loading: "Loading the Python runtime (the first run only)…",
      running: "Running…",
      done: "Finished, exit code {code}; first output line {first} ms after the click, whole run {total} ms.",
      stopped: "Stopped.",
      failed: "The runtime failed: {message}",
      usedEdits: "This run used the files you edited in the page: {files}.",
      noRuntime: "This build has no in-page Python runtime. In a clone of the repository, run:",
      noRuntimeExample: "This build has no in-page Python runtime. Run this code in Python in a clone of the repository.",
      rounds: "The rounds of this run (from this run's trace events)",
      inFlight: "Rounds launched and read at each step of this run, and the rounds still in flight after it",
      inFlightHead: ["Round", "Launched", "Read", "In flight after it"],
      check: "Check",
      resetExercise: "Reset",
      showSolution: "Show solution",
      hideSolution: "Hide solution",
      confirmReset: "Put the starter back in place of your code? What you wrote will be lost.",
      checking: "Checking…",
      checked: "Check finished, exit code {code} (0: every check holds); {total} ms after the click, {sinceOpen} ms after the page opened.",
      kept: "Your code is kept in this browser; a reload loses nothing.",
      solutionNote: "The engine's own function (what python -m mini_deepinfer.workbook solution {lesson} prints):",
      noRuntimeExercise: "This build has no in-page Python runtime. In a clone of the repository, run:",
      abcRounds: "The rounds of this run (from this run's trace events and the slot pools after each round)",
      abcHead: ["Round", "What runs (request, phase, positions)", "Tokens", "Committed", "Finished and freed",
        "KV free after, unreserved", "State slots free after", "Still waiting"],
    },
  };
  const lang = (document.documentElement.lang || "zh").startsWith("en") ? "en" : "zh";
  const t = (key, values) =>
    TEXT[lang][key].replace(/\{(\w+)\}/g, (_, name) => (values && name in values ? values[name] : ""));

  function element(tag, attrs, children) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([name, value]) => {
      if (name === "text") node.textContent = value;
      else node.setAttribute(name, value);
    });
    (children || []).forEach((child) => node.append(child));
    return node;
  }

  /* ---- edits of the engine's files, kept in localStorage ---- */
  const store = {
    get(path) {
      try {
        return window.localStorage.getItem(EDIT_KEY + path);
      } catch (error) {
        return null;
      }
    },
    set(path, text) {
      try {
        if (text === null) window.localStorage.removeItem(EDIT_KEY + path);
        else window.localStorage.setItem(EDIT_KEY + path, text);
      } catch (error) {
        /* storage off: the edit still holds for this page */
      }
    },
    all(paths) {
      const edits = {};
      paths.forEach((path) => {
        const text = store.get(path);
        if (text !== null) edits[path] = text;
      });
      return edits;
    },
  };

  /* ---- the one worker of the page ---- */
  const session = { worker: null, next: 1, waiting: new Map(), files: [] };

  function send(message, onLine) {
    if (!session.worker) {
      session.worker = new Worker(WORKER);
      session.worker.onmessage = (event) => {
        const reply = event.data;
        const pending = session.waiting.get(reply.id);
        if (!pending) return;
        if (reply.type === "line") pending.onLine(reply);
        else if (reply.type === "ready") pending.onReady(reply);
        else {
          session.waiting.delete(reply.id);
          reply.type === "failed" ? pending.reject(new Error(reply.message)) : pending.resolve(reply);
        }
      };
    }
    const id = session.next++;
    return new Promise((resolve, reject) => {
      session.waiting.set(id, { resolve, reject, onLine: onLine || (() => {}), onReady: () => {} });
      session.worker.postMessage({ ...message, id, base: BASE });
    });
  }

  function stopWorker() {
    if (!session.worker) return;
    session.worker.terminate();
    session.worker = null;
    session.waiting.forEach((pending) => pending.reject(new Error("stopped")));
    session.waiting.clear();
  }

  /* ---- one widget ---- */
  function noRuntime(box) {
    const kind = box.dataset.inpageKind;
    const note = kind === "command" ? t("noRuntime") : t("noRuntimeExample");
    const button = element("button", { type: "button", class: "md-button inpage-run__run", disabled: "" }, [note]);
    box.append(button);
    if (kind === "command") {
      const line = [command(box), box.dataset.inpageValue || ""].join(" ").trim();
      box.append(element("pre", { class: "inpage-run__local" }, [element("code", { text: line })]));
    }
    box.hidden = false;
  }

  const TABLE_TEXT = { rounds: ["rounds", null], "abc-rounds": ["abcRounds", "abcHead"], "in-flight": ["inFlight", "inFlightHead"] };

  function tableFrom(box, kind, rows) {
    const pageTable = document.querySelector(`.inpage-table[data-inpage-table="${kind}"] table`);
    const [captionKey, headKey] = TABLE_TEXT[kind] || TABLE_TEXT["in-flight"];
    const table = element("table");
    if (pageTable && pageTable.tHead) table.append(pageTable.tHead.cloneNode(true));
    else {
      const head = element("tr", {}, TEXT[lang][headKey || "inFlightHead"].map((cell) => element("th", { text: cell })));
      table.append(element("thead", {}, [head]));
    }
    const body = element("tbody");
    rows.forEach((row) => {
      const cells = row.map((cell) => {
        const code = /^`(.*)`$/.exec(cell);
        return element("td", {}, [code ? element("code", { text: code[1] }) : cell]);
      });
      body.append(element("tr", {}, cells));
    });
    table.append(body);
    const caption = t(captionKey);
    return element("div", { class: "inpage-run__table md-typeset__table" }, [element("p", { text: caption }), table]);
  }

  function build(box) {
    const kind = box.dataset.inpageKind;
    const initial = box.dataset.inpageValue || "";
    const files = (box.dataset.inpageFiles || "").split(" ").filter(Boolean);
    const parts = {};
    parts.input =
      kind === "command"
        ? element("input", {
          class: "inpage-run__flags", type: "text", spellcheck: "false", placeholder: t("flagsPlaceholder"),
          "aria-label": t("flags") + " " + command(box),
        })
        : element("textarea", { class: "inpage-run__code", spellcheck: "false", rows: "8" });
    parts.input.value = initial;
    parts.run = element("button", { type: "button", class: "md-button md-button--primary inpage-run__run" }, [t("run")]);
    parts.stop = element("button", { type: "button", class: "md-button inpage-run__stop", disabled: "" }, [t("stop")]);
    const bar = element("div", { class: "inpage-run__bar" }, [parts.run, parts.stop]);
    if (kind !== "command") {
      parts.resetCode = element("button", { type: "button", class: "md-button inpage-run__reset-code" }, [t("resetCode")]);
      bar.append(parts.resetCode);
    }
    const line =
      kind === "command"
        ? element("label", { class: "inpage-run__command" }, [element("span", { text: t("flags") + " " }), parts.input])
        : parts.input;
    parts.select = element("select", { class: "inpage-run__files" }, [element("option", { value: "", text: t("choose") })]);
    files.forEach((path) => parts.select.append(element("option", { value: path, text: path })));
    parts.file = element("textarea", { class: "inpage-run__file", spellcheck: "false", rows: "16", hidden: "" });
    parts.resetFile = element("button", { type: "button", class: "md-button inpage-run__reset-file", hidden: "" }, [t("resetFile")]);
    parts.fileNote = element("p", { class: "inpage-run__status inpage-run__file-note", role: "status" });
    const editor = element("details", { class: "inpage-run__editor" }, [
      element("summary", { text: t("files") }),
      parts.select, parts.resetFile, parts.fileNote, parts.file,
    ]);
    parts.output = element("pre", { class: "inpage-run__output", hidden: "" });
    parts.status = element("p", { class: "inpage-run__status", role: "status" });
    parts.table = element("div", { class: "inpage-run__tables", hidden: "" });
    box.append(line, bar, editor, parts.status, parts.output, parts.table);
    box.hidden = false;
    box.dataset.inpageState = "idle";
    wire(box, parts, files, initial);
  }

  function markEdited(parts, files) {
    [...parts.select.options].forEach((option) => {
      if (option.value) option.textContent = option.value + (store.get(option.value) !== null ? t("edited") : "");
    });
    return files.filter((path) => store.get(path) !== null);
  }

  function setState(box, parts, state, message) {
    box.dataset.inpageState = state;
    parts.status.textContent = message || "";
    const busy = state === "loading" || state === "running";
    document.querySelectorAll(".inpage-run__run").forEach((button) => {
      if (!button.closest("[data-inpage-runtime='no']")) button.disabled = busy;
    });
    parts.stop.disabled = !busy;
  }

  function printLine(parts, reply) {
    const text = reply.text + "\n";
    parts.output.append(reply.stream === "stderr" ? element("span", { class: "inpage-run__stderr", text }) : text);
  }

  function wire(box, parts, files, initial) {
    const originals = {};
    markEdited(parts, files);

    parts.run.addEventListener("click", async () => {
      const clicked = performance.now();
      let first = null;
      parts.output.textContent = "";
      parts.output.hidden = false;
      parts.table.textContent = "";
      parts.table.hidden = true;
      setState(box, parts, "loading", t(session.worker ? "running" : "loading"));
      const onLine = (reply) => {
        if (first === null) {
          first = performance.now() - clicked;
          box.dataset.inpageFirstMs = String(Math.round(first));
          setState(box, parts, "running", t("running"));
        }
        printLine(parts, reply);
      };
      try {
        const reply = await send(
          {
            type: "run", kind: box.dataset.inpageKind, command: box.dataset.inpageCommand || "", value: parts.input.value,
            table: box.dataset.inpageTable || "", edits: store.all(files),
          },
          onLine,
        );
        const total = performance.now() - clicked;
        box.dataset.inpageRunMs = String(Math.round(total));
        if (first === null) box.dataset.inpageFirstMs = String(Math.round(total));
        if (reply.table) {
          parts.table.append(tableFrom(box, box.dataset.inpageTable, reply.table));
          parts.table.hidden = false;
        }
        const used = reply.edited && reply.edited.length ? " " + t("usedEdits", { files: reply.edited.join(", ") }) : "";
        box.dataset.inpageCode = String(reply.code);
        setState(box, parts, "done", t("done", {
          code: reply.code, first: box.dataset.inpageFirstMs, total: Math.round(total),
        }) + used);
      } catch (error) {
        if (error.message === "stopped") setState(box, parts, "stopped", t("stopped"));
        else setState(box, parts, "failed", t("failed", { message: error.message }));
      }
    });

    parts.stop.addEventListener("click", () => stopWorker());

    if (parts.resetCode) parts.resetCode.addEventListener("click", () => { parts.input.value = initial; });

    parts.select.addEventListener("change", async () => {
      const path = parts.select.value;
      parts.file.hidden = parts.resetFile.hidden = !path;
      if (!path) return;
      parts.file.value = store.get(path) ?? "";
      box.dataset.inpageFile = "loading";
      if (!(path in originals)) {
        parts.file.readOnly = true; /* nothing to edit until the shipped text is here */
        parts.fileNote.textContent = t("loadingFile");
      }
      try {
        if (!(path in originals)) originals[path] = (await send({ type: "read", path })).text;
        if (parts.select.value !== path) return;
        parts.file.value = store.get(path) ?? originals[path];
        parts.file.readOnly = false;
        parts.fileNote.textContent = "";
        box.dataset.inpageFile = path;
      } catch (error) {
        parts.fileNote.textContent = "";
        setState(box, parts, "failed", t("failed", { message: error.message }));
      }
    });

    parts.file.addEventListener("input", () => {
      const path = parts.select.value;
      if (!path || !(path in originals)) return;
      store.set(path, parts.file.value === originals[path] ? null : parts.file.value);
      markEdited(parts, files);
    });

    parts.resetFile.addEventListener("click", () => {
      const path = parts.select.value;
      if (!path) return;
      store.set(path, null);
      if (path in originals) parts.file.value = originals[path];
      markEdited(parts, files);
    });
  }

  /* ---- a workbook exercise: the reader's code, Check, Reset, Show solution ---- */
  const WORKBOOK_KEY = "mini-deepinfer.workbook:";

  function starterOf(box) {
    /* the starter the page shows in its "lesson_NN.py" box, just before the exercise */
    let node = box.previousElementSibling;
    while (node && !node.matches("details")) node = node.previousElementSibling;
    const code = node && node.querySelector("code");
    return code ? code.textContent : "";
  }

  function kept(key) {
    try {
      return window.localStorage.getItem(key);
    } catch (error) {
      return null;
    }
  }

  function keep(key, text) {
    try {
      if (text === null) window.localStorage.removeItem(key);
      else window.localStorage.setItem(key, text);
    } catch (error) {
      /* storage off: the code still holds for this page */
    }
  }

  function buildExercise(box) {
    const lesson = box.dataset.inpageLesson;
    const name = "lesson_" + lesson.padStart(2, "0") + ".py";
    if (box.dataset.inpageRuntime !== "yes") {
      const lines = ["start", "check"].map((verb) => `python -m mini_deepinfer.workbook ${verb} ${lesson}`);
      box.append(element("p", { text: t("noRuntimeExercise") }),
        element("pre", { class: "inpage-run__local" }, [element("code", { text: lines.join("\n") })]));
      box.hidden = false;
      return;
    }
    const key = WORKBOOK_KEY + name;
    const starter = starterOf(box);
    const parts = {
      code: element("textarea", { class: "inpage-exercise__code", spellcheck: "false", rows: "24", "aria-label": name }),
      check: element("button", { type: "button", class: "md-button md-button--primary inpage-exercise__check" }, [t("check")]),
      reset: element("button", { type: "button", class: "md-button inpage-exercise__reset" }, [t("resetExercise")]),
      solution: element("button", { type: "button", class: "md-button inpage-exercise__solution" }, [t("showSolution")]),
      stop: element("button", { type: "button", class: "md-button inpage-exercise__stop", disabled: "" }, [t("stop")]),
      status: element("p", { class: "inpage-run__status", role: "status", text: t("kept") }),
      output: element("pre", { class: "inpage-run__output", hidden: "" }),
      answer: element("div", { class: "inpage-exercise__answer", hidden: "" }),
    };
    parts.code.value = kept(key) ?? starter;
    const bar = element("div", { class: "inpage-run__bar" }, [parts.check, parts.stop, parts.reset, parts.solution]);
    box.append(element("p", { class: "inpage-exercise__name" }, [element("code", { text: name })]), parts.code, bar,
      parts.status, parts.output, parts.answer);
    box.hidden = false;
    box.dataset.inpageState = "idle";
    wireExercise(box, parts, { lesson, key, starter });
  }

  function wireExercise(box, parts, { lesson, key, starter }) {
    parts.code.addEventListener("input", () => keep(key, parts.code.value === starter ? null : parts.code.value));
    parts.stop.addEventListener("click", () => stopWorker()); /* a loop that never ends ends with the worker */
    parts.reset.addEventListener("click", () => {
      if (!window.confirm(t("confirmReset"))) return;
      parts.code.value = starter;
      keep(key, null);
    });
    parts.check.addEventListener("click", async () => {
      const clicked = performance.now();
      let first = null;
      parts.output.textContent = "";
      parts.output.hidden = false;
      parts.check.disabled = true;
      parts.stop.disabled = false;
      box.dataset.inpageState = "running";
      parts.status.textContent = t(session.worker ? "checking" : "loading");
      const onLine = (reply) => {
        if (first === null) first = performance.now() - clicked;
        printLine(parts, reply);
      };
      try {
        const reply = await send({ type: "check", lesson: Number(lesson), lang, source: parts.code.value }, onLine);
        const done = performance.now();
        box.dataset.inpageFirstMs = String(Math.round(first ?? done - clicked));
        box.dataset.inpageRunMs = String(Math.round(done - clicked));
        box.dataset.inpageSinceOpenMs = String(Math.round(done)); /* performance.now() counts from the page's opening */
        box.dataset.inpageCode = String(reply.code);
        box.dataset.inpageState = "done";
        parts.status.textContent = t("checked", { code: reply.code, total: Math.round(done - clicked), sinceOpen: Math.round(done) });
      } catch (error) {
        box.dataset.inpageRunMs = String(Math.round(performance.now() - clicked));
        box.dataset.inpageState = error.message === "stopped" ? "stopped" : "failed";
        parts.status.textContent = error.message === "stopped" ? t("stopped") : t("failed", { message: error.message });
      } finally {
        parts.check.disabled = false;
        parts.stop.disabled = true;
      }
    });
    parts.solution.addEventListener("click", async () => {
      if (!parts.answer.hidden) {
        parts.answer.hidden = true;
        parts.solution.textContent = t("showSolution");
        return;
      }
      try {
        if (!parts.answer.childElementCount) {
          const reply = await send({ type: "exercise", lesson: Number(lesson), lang, which: "solution" });
          parts.answer.append(element("p", { text: t("solutionNote", { lesson }) }),
            element("pre", { class: "inpage-exercise__solution-code" }, [element("code", { text: reply.text })]));
        }
        parts.answer.hidden = false;
        parts.solution.textContent = t("hideSolution");
      } catch (error) {
        parts.status.textContent = t("failed", { message: error.message });
      }
    });
  }

  function start() {
    document.querySelectorAll("div.inpage-run").forEach((box) => {
      if (box.dataset.inpageState) return;
      if (box.dataset.inpageRuntime === "yes") build(box);
      else noRuntime(box);
    });
    document.querySelectorAll("div.inpage-exercise").forEach((box) => {
      if (!box.dataset.inpageState) buildExercise(box);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
