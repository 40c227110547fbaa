"""The performance page's tables in Chinese: the English snippets of the benchmark generators, translated.

Scope: what a reader reads in a benchmark snippet (``gen_performance``, ``gen_rounds``, ``gen_speculative``,
``gen_kernels``): the provenance line (``key=value, ...``), the provenance bullets, the head cells and row
labels of each table, the words among the values (``yes``, ``not measured``), and the lines under a table.
Exact phrases come from the tables ``[zh_tables.*]`` of ``words.toml`` beside this module (data that a
translator edits), labels with a number in them from the patterns below (logic, so they stay here); numbers,
units, code spans and the values a record holds (device names, versions, dates) are kept as they are. The
report keys of the rounds table stay beside their translation, since the pages cite them by key. A head
cell, a row label, a key or a line that no rule covers raises ``GeneratorError``, so a new English label
cannot reach the Chinese page unnoticed. Non-scope: the English snippets (their generators) and the pages'
prose.
"""

from __future__ import annotations

import re

from site_scripts.build.common import GeneratorError, phrases

_TABLES = phrases(__name__)  # English -> Chinese, in words.toml beside this module
HEAD = _TABLES["head"]  # table head cells
ROUND_KEYS = _TABLES["round_keys"]  # the rounds report's summary keys -> what they measure
LABELS = _TABLES["labels"]  # row labels without a number
MEASUREMENTS = _TABLES["measurements"]  # what a variant row measured, where no pattern gives it
VARIANT_EXECUTION, SAME, CASES, SIDES = (_TABLES[k] for k in ("variant_execution", "same", "cases", "sides"))
VALUES = _TABLES["values"]  # words among the values
DESCRIBE_KEYS = _TABLES["describe_keys"]  # the provenance line's keys
DESCRIBE_NUMBERS = _TABLES["describe_numbers"]  # a provenance value that is a bare number
EXECUTION = _TABLES["execution"]  # how a round benchmark ran
PATTERNS = [  # (English, Chinese) for labels and values with a number or a name in them
    (r"^(always|sometimes|never|half-depth) k=(\d+)$", lambda m: f"{CASES[m[1]]} k={m[2]}"),
    (r"^prefill, (\d+) tokens \(s\)$", r"prefill，\1 个 token（秒）"),
    (r"^decode, batch (\d+), prompts? ([\d-]+) \(ms/step\)$",
     r"decode，batch \1，prompt \2 个 token（毫秒/步）"),
    (r"^decode, batch (\d+) \(tokens/s\)$", r"decode，batch \1（token/秒）"),
    (r"^read bandwidth, best \[median\] of (\d+)$", r"读带宽，\1 次里最好的 [中位数]"),
    (r"^batch (\d+): roofline / step, ours / transformers$",
     r"batch \1：roofline / 一步，我们 / transformers"),
    (r"^batch (\d+): every linear layer once, (ours|transformers) \(head alone\)$",
     lambda m: f"batch {m[1]}：每个线性层各跑一次，{SIDES[m[2]]}（括号里只算输出头）"),
    (r"^(\d+) tokens$", r"\1 个 token"),
    (r"^decode tok/s at batch (\d+), ours / transformers$",
     r"batch \1 的 decode token/秒，我们 / transformers"),
    (r"^decode step at batch (\d+), roofline / ours$", r"batch \1 的 decode 一步，roofline / 我们"),
    (r"^prefill of (\d+) tokens, transformers time / ours$",
     r"\1 个 token 的 prefill，transformers 的时间 / 我们"),
    (r"^`(\w+)`$", lambda m: f"{ROUND_KEYS[m[1]]}（`{m[1]}`）" if m[1] in ROUND_KEYS else m[0]),
    (r"^(ours|transformers), (float32|bfloat16|float16), (eager|graphs|compiled): (.*)$",
     lambda m: f"{SIDES[m[1]]}，{m[2]}，{VARIANT_EXECUTION[m[3]]}：{_variant_measurement(m[4])}"),
]
VALUE_UNITS = [(r" ms/step$", " 毫秒/步")]
DESCRIBE_VALUES = [
    (r"(\d+) parameters", r"\1 个参数"),
    (r"random weights", "随机权重"),
    (r"^not recorded$", "没有记录"),
    (r"no flags listed", "没有列出标志"),
    (r"second half damped x([\d.]+)", r"后一半层乘以 \1"),
    (r"^(\d+)x(\d+) new tokens$", r"\1 条，每条 \2 个新 token"),
    (r"^(\d+) after (\d+) warm-up$", r"\1 次，先预热 \2 次"),
    (r"->", "→"),
    (r", ", "，"),
    (r" \(", "（"),
    (r"\)$", "）"),
]
LINES = [  # whole lines outside the tables
    (r"^- `execution`: (eager|graphs \(static buffers; a CPU captures nothing\)); "
     r"runner rounds over all runs: (\d+) graph, (\d+) eager$",
     lambda m: (f"- `execution`：{EXECUTION[m[1].split()[0]]}；"
                f"所有运行里 runner 的轮次：图 {m[2]} 轮，eager {m[3]} 轮")),
    (r"^- `source_sha`: `(\w+)` \(clean\)$", r"- `source_sha`：`\1`（checkout 里没有未提交的改动）"),
    (r"^- `source_sha`: `(\w+)` \(dirty\)$", r"- `source_sha`：`\1`（checkout 里有未提交的改动）"),
    (r"^- `source_sha`: not recorded$", "- `source_sha`：没有记录"),
    (r"^- `execution`: eager \(commit (\w+) has no graph execution\) — stated in `([^`]+)`, "
     r"not in the report$",
     r"- `execution`：eager（提交 \1 还没有图执行）；写在 `\2` 里，报告本身没有写"),
    (r"^- `([^`]+/provenance\.json)`: measured on one ([^,]+) from a clean checkout of commit (\w+); "
     r"the only edit to the file renamed the scratch folder in its `--output` path to `outputs/…`; "
     r"nothing else was changed$",
     r"- `\1`：在一块 \2 上、从提交 \3 的干净 checkout 测得；"
     r"文件只改过一处，把 `--output` 路径里的临时文件夹改名为 `outputs/…`，别的都没动"),
    (r"^`tokens_identical=(true|false)` \((\d+) runs: (identical|differ)\)$",
     lambda m: f"`tokens_identical={m[1]}`（{m[2]} 次运行：{SAME[m[3]]}）"),
    (r"^`tokens_identical=(true|false)`, `slots_returned=(true|false)` \((\d+) runs\)$",
     r"`tokens_identical=\1`，`slots_returned=\2`（\3 次运行）"),
    (r"^`shared: requests 2-8 reach their first token ([\d.]+)x sooner with the cache; unshared: the cache "
     r"changes the run's wall time by ([+-][\d.]+) %`$",
     r"`共享前缀：开缓存时，第 2–8 条请求拿到首 token 的速度是关缓存时的 \1 倍；"
     r"不共享：缓存使整次运行的用时变化 \2 %`"),
    (r"^`tokens_identical=(true|false)`, `slots_returned=(true|false)`$",
     r"`tokens_identical=\1`，`slots_returned=\2`"),
    (r"^`tokens_agree=true` \(greedy, every measurement\)$",
     "`tokens_agree=true`（greedy，每一项测量都一致）"),
    (r"^`tokens_agree=false` \(greedy; per measurement: (.*)\)$",
     lambda m: "`tokens_agree=false`（greedy；逐项：" + _agreement(m[1]) + "）"),
    (r"^Operators per decode step: ([\w.-]+) shape, random weights, bfloat16, batch 1, counted on the "
     r"CPU with a dispatch mode \(views and allocations excluded\); run eagerly on an accelerator, each is "
     r"one kernel launch\.$",
     r"每个 decode 步派发的算子：\1 形状，随机权重，bfloat16，batch 1，在 CPU 上用 dispatch mode 数"
     r"（视图和内存分配不计）；在加速器上 eager 执行时，每个算子就是主机发出的一个 kernel。"),
    (r"^Most common on the graph path: (.*)\.$", r"图路径上最多的算子：\1。"),
]


def _variant_measurement(label: str) -> str:
    """What a variant row measured (``decode, batch 1 (tokens/s)``, ...), in Chinese."""
    found = MEASUREMENTS.get(label) or _apply(PATTERNS, label)
    if found is None:
        raise GeneratorError(f"zh_tables: no Chinese for the variant measurement {label!r}")
    return found


def _agreement(each: str) -> str:
    """``prefill 512 tokens true, decode batch 1 false`` in Chinese."""
    each = re.sub(r"prefill (\d+) tokens", r"prefill \1 个 token", each)
    return each.replace(", ", "，")


def _apply(rules: list, text: str) -> str | None:
    """The first rule that matches all of ``text``, applied; None if none does."""
    for pattern, replacement in rules:
        if re.search(pattern, text):
            return re.sub(pattern, replacement, text)
    return None


def describe_line(line: str) -> str:
    """The provenance line: each ``key=value`` as a Chinese label and its value, in Chinese."""
    items, depth, start = [], 0, 0
    body = line.strip("`")
    for i, char in enumerate(body):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if body.startswith(", ", i) and depth == 0:
            items.append(body[start:i])
            start = i + 2
    items.append(body[start:])
    out = []
    for item in items:
        key, _, value = item.partition("=")
        if key not in DESCRIBE_KEYS:
            raise GeneratorError(f"zh_tables: no Chinese for the provenance key {key!r}")
        if value.isdigit() and key in DESCRIBE_NUMBERS:
            value = DESCRIBE_NUMBERS[key].format(value)
        for pattern, replacement in DESCRIBE_VALUES:
            value = re.sub(pattern, replacement, value)
        out.append(f"{DESCRIBE_KEYS[key]} {value}")
    return "，".join(out) + "。"


def cell(text: str, head: bool, label: bool) -> str:
    """One table cell: a head cell or a row label must be translated; a value only where it has words."""
    text = text.strip()
    if head:
        if text not in HEAD:
            raise GeneratorError(f"zh_tables: no Chinese for the head cell {text!r}")
        return HEAD[text]
    if label:
        found = LABELS.get(text) or _apply(PATTERNS, text)
        if found is None and re.search(r"[A-Za-z]{2,}", text):
            raise GeneratorError(f"zh_tables: no Chinese for the row label {text!r}")
        return found if found is not None else text
    return VALUES.get(text) or _apply(VALUE_UNITS, text) or text


def table_line(line: str, head: bool) -> str:
    cells = line.strip().strip("|").split("|")
    if all(re.fullmatch(r"\s*:?-+:?\s*", c) for c in cells):
        return line
    return "| " + " | ".join(cell(c, head, i == 0) for i, c in enumerate(cells)) + " |"


def translate(markdown: str) -> str:
    """A benchmark snippet in Chinese, line by line (see the module's docstring)."""
    lines, out = markdown.split("\n"), []
    for number, line in enumerate(lines):
        if line.startswith("|"):
            head = not (number and lines[number - 1].startswith("|"))
            out.append(table_line(line, head))
        elif line.startswith("`device="):
            out.append(describe_line(line))
        elif line.strip():
            found = _apply(LINES, line)
            if found is None:
                raise GeneratorError(f"zh_tables: no Chinese for the line {line!r}")
            out.append(found)
        else:
            out.append(line)
    return "\n".join(out)
