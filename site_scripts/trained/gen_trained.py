"""The trained target and draft on the site: their training records and measurements as tables, their text.

Scope: Markdown tables from the committed records under ``trained/`` (``target/training.json``,
``draft/training.json``, ``draft-corpus-only-training.json``, written by ``python -m
training``; ``measurements.json``, written by ``python -m training.measure``):
the models and their bits per character, speculative acceptance against the draft, the width and the
temperature, tokens per second against plain decoding, which tokens the draft gets right, and repetition.
And the terminal output of the pages' ``generate`` commands on ``trained/target`` (greedy, sampled, and
speculative with ``trained/draft``), run as the doc tests run them.

Non-scope: training and measuring (never done at build time: an hour of CPU, and timings change on every
run), the loss-curve picture (``gen_trained_pictures``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from site_scripts.build.common import ROOT, markdown_table, read_json, run_shell

TRAINED = ROOT / "trained"
LANGUAGES = {"en": "English", "zh": "Chinese"}

# --8<-- [start:commands]
GENERATE = "python -m mini_deepinfer.generate --model trained/target --raw"
COMMANDS: dict[str, str] = {
    "trained/generate-greedy.txt": f"""\
{GENERATE} --prompt $'ACT I.\\nSCENE I. A street.\\n\\n' \\
  --max-new-tokens 60 --cache-capacity 128""",
    "trained/generate-poem.txt": f"""\
{GENERATE} --prompt $'春望\\n杜甫\\n' \\
  --max-new-tokens 40 --cache-capacity 128""",
    "trained/sampling.txt": f"""\
for flags in "" "--temperature 0.8 --seed 0" "--temperature 1.5 --seed 0" \\
    "--temperature 1.5 --top-k 5 --seed 0" "--temperature 1.5 --top-p 0.5 --seed 0"; do
  echo "== ${{flags:-greedy}}"
  {GENERATE} --prompt $'KING.\\n' --max-new-tokens 40 \\
    --cache-capacity 128 $flags
done""",
    "trained/speculative.txt": f"""\
{GENERATE} --draft-model trained/draft --speculative \\
  --draft-width 4 --check-greedy --prompt $'ACT I.\\nSCENE I. A street.\\n\\n' \\
  --prompt $'春望\\n杜甫\\n' --max-new-tokens 48 --cache-capacity 256""",
}
# --8<-- [end:commands]


def record(name: str) -> dict[str, Any]:
    path = TRAINED / f"{name}-training.json" if name.endswith("corpus-only") else \
        TRAINED / name / "training.json"
    return read_json(path)


def measurements() -> dict[str, Any]:
    return read_json(TRAINED / "measurements.json")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def models_table() -> str:
    """Shape, training and held-out / unseen bits per character of the target and both drafts."""
    rows = []
    for name, label in (("target", "trained/target"), ("draft", "trained/draft (distilled)"),
                        ("draft-corpus-only", "draft, corpus only (not committed)")):
        made = record(name)
        config, scores, schedule = made["config"], made["scores"], made["schedule"]
        kinds = ", ".join(f"{config['layer_types'].count(k)} {k.split('_')[0]}"
                          for k in ("linear_attention", "full_attention"))
        rows.append([label, f"{config['hidden_size']} x {len(config['layer_types'])} ({kinds})",
                     f"{made['parameters'] / 1e6:.2f} M", f"{schedule['steps']}",
                     f"{made['tokens_seen'] / 1e6:.2f} M", _minutes(made["training"]["wall_s"]),
                     f"{made['cpu']}, {made['threads']} threads",
                     *(f"{scores[key]['bits_per_char']:.2f}" for key in
                       ("held_out_en", "held_out_zh", "unseen_en", "unseen_zh"))])
    header = ["model", "hidden x layers", "parameters", "steps", "tokens seen", "training time", "trained on",
              "held-out English", "held-out Chinese", "unseen English", "unseen Chinese"]
    target = record("target")
    note = (f"`bits per character; target: torch={target['torch']}, "
            f"seed={target['seed']}, batch={target['schedule']['batch']} x {target['schedule']['seq_len']} "
            f"tokens, commit={target['commit'][:12]}`")
    return "\n".join([note, "", *markdown_table(header, rows)]) + "\n"


# --8<-- [start:targets]
QUALITY_TARGETS = (  # (what, where in the records, at most / at least, threshold)
    ("held-out English, bits per character", ("target", "held_out_en"), "at most", 1.8),
    ("held-out Chinese, bits per character", ("target", "held_out_zh"), "at most", 6.7),
    ("English, draft tokens accepted per round (width 4, greedy)", ("widths", "en"), "at least", 2.0),
    ("Chinese, draft tokens accepted per round (width 4, greedy)", ("widths", "zh"), "at least", 2.0),
)
# --8<-- [end:targets]


def target_values() -> list[tuple[str, str, float, float, bool]]:
    """Each quality target with the measured value: (what, bound, threshold, value, met)."""
    scores, widths = record("target")["scores"], measurements()["widths"]
    found = []
    for what, (where, key), bound, threshold in QUALITY_TARGETS:
        value = scores[key]["bits_per_char"] if where == "target" else widths[key]["4"]["accepted_per_round"]
        met = value <= threshold if bound == "at most" else value >= threshold
        found.append((what, bound, threshold, value, met))
    return found


def targets_table() -> str:
    """The quality the models were trained for against what the records measured."""
    rows = [[what, f"{bound} {threshold}", f"{value:.2f}", "yes" if met else "**no**"]
            for what, bound, threshold, value, met in target_values()]
    return "\n".join(markdown_table(["figure", "target", "measured", "met"], rows)) + "\n"


def corpora_table() -> str:
    """Each corpus: package, version, licence, SHA-256, and what it is used for."""
    made = record("target")
    rows = [[f"{c['registry']} `{c['name']}` {c['version']}", c["licence"], f"`{c['sha256'][:16]}…`"]
            for c in made["corpora"]]
    lines = markdown_table(["package", "licence", "SHA-256"], rows, align="lll")
    uses = [f"- `{key}`: {text}" for key, text in made["sources"].items()]
    return "\n".join([*lines, "", *uses]) + "\n"


def _acceptance_rows(by_key: dict[str, dict[str, Any]], keys: list[str]) -> list[list[str]]:
    rows = []
    for key in keys:
        row = [key]
        for lang in LANGUAGES:
            got = by_key[lang][key]
            row += [f"{got['accepted_per_round']:.2f}", f"{got['accepted']}/{got['proposed']}"]
        rows.append(row)
    return rows


def _acceptance_header(first: str) -> list[str]:
    return [first] + [f"{name} {what}" for name in LANGUAGES.values()
                      for what in ("accepted per round", "drafts accepted")]


def _measured_note(m: dict[str, Any]) -> str:
    return (f"`cpu={m['cpu']}, threads={m['threads']}, torch={m['torch']}, compute={m['compute_dtype']}, "
            f"{len(m['prompts']['en'])} held-out prompts per language, {m['new_tokens']} new tokens each`")


def _acceptance_table(key: str, first: str) -> str:
    """Acceptance per setting of ``measurements.json``'s ``key`` (widths, temperatures, drafts), per
    language."""
    m = measurements()
    rows = _acceptance_rows(m[key], list(m[key]["en"]))
    return "\n".join([_measured_note(m), "", *markdown_table(_acceptance_header(first), rows)]) + "\n"


def widths_table() -> str:
    return _acceptance_table("widths", "width k (greedy)")


def temperatures_table() -> str:
    return _acceptance_table("temperatures", "temperature (k=4)")


def drafts_table() -> str:
    return _acceptance_table("drafts", "draft (k=4, greedy)")


def speed_table() -> str:
    m = measurements()
    rows = []
    for lang, name in LANGUAGES.items():
        plain = m["speed"][lang]["plain"]["wall_s"]
        for case, got in m["speed"][lang].items():
            rows.append([name, case, f"{got['tokens_per_s']:.1f}", f"{got['wall_s']:.3f}",
                         f"{got['wall_s'] / plain:.2f}"])
    note = (f"`cpu={m['cpu']}, threads={m['threads']}, one greedy request of {2 * m['new_tokens']} tokens, "
            "median of 3 runs after one warm-up`")
    header = ["prompt", "decoding", "tokens/s", "wall s", "time vs plain"]
    return "\n".join([note, "", *markdown_table(header, rows)]) + "\n"


def agreement_table() -> str:
    m = measurements()
    kinds: list[str] = []
    for lang in LANGUAGES:
        kinds += [k for k in m["agreement_by_kind"][lang] if k not in kinds]
    rows = []
    for kind in kinds:
        row = [kind]
        for lang in LANGUAGES:
            got = m["agreement_by_kind"][lang].get(kind)
            row.append(f"{got['share']:.0%} ({got['agree']}/{got['tokens']})" if got else "-")
        rows.append(row)
    header = ["token kind", *(f"{n}: draft = target" for n in LANGUAGES.values())]
    return "\n".join(markdown_table(header, rows)) + "\n"


def repetition_table() -> str:
    m = measurements()
    rows = [[name, ", ".join(f"{v:.2f}" for v in m["repetition"][lang]["distinct_4grams"])]
            for lang, name in LANGUAGES.items()]
    header = ["prompts", "distinct 4-grams / all 4-grams, 200 greedy tokens each"]
    return "\n".join(markdown_table(header, rows)) + "\n"


# Sentences under the tables, in both languages, written from the same numbers (never typed by hand).
def _per_round(table: dict[str, Any], lang: str, key: str) -> str:
    return f"{table[lang][key]['accepted_per_round']:.2f}"


def widths_summary(zh: bool = False) -> str:
    w = measurements()["widths"]
    one = {lang: f"{w[lang]['1']['acceptance']:.0%}" for lang in LANGUAGES}
    four = {lang: _per_round(w, lang, "4") for lang in LANGUAGES}
    eight = {lang: _per_round(w, lang, "8") for lang in LANGUAGES}
    if zh:
        return (f"宽度 1 时，草稿的 token 在英文里有 {one['en']} 被接受，中文里有 {one['zh']}；"
                f"宽度 4 时每轮平均接受 {four['en']}（英文）和 {four['zh']}（中文）个候选，"
                f"宽度 8 时是 {eight['en']} 和 {eight['zh']}。\n")
    return (f"At width 1 the draft's token is accepted {one['en']} of the time in English and {one['zh']} in "
            f"Chinese; at width 4 a round accepts {four['en']} (English) and {four['zh']} (Chinese) draft "
            f"tokens on average, at width 8 {eight['en']} and {eight['zh']}.\n")


def drafts_summary(zh: bool = False) -> str:
    d = measurements()["drafts"]
    got = {name: {lang: _per_round(d, lang, name) for lang in LANGUAGES} for name in d["en"]}
    names = list(got)
    if zh:
        parts = "，".join(f"{ZH_DRAFTS.get(n, n)}草稿 {got[n]['en']} 和 {got[n]['zh']}" for n in names)
        return f"宽度 4、greedy，每轮平均接受的候选数（英文和中文）：{parts}。\n"
    parts = ", ".join(f"the {n.replace(' ', '-')} draft {got[n]['en']} and {got[n]['zh']}" for n in names)
    return f"Draft tokens accepted per round at width 4, greedy (English and Chinese): {parts}.\n"


ZH_DRAFTS = {"distilled": "蒸馏的", "corpus only": "只用语料训练的", "random": "随机的"}


def temperatures_summary(zh: bool = False) -> str:
    t = measurements()["temperatures"]
    keys = list(t["en"])
    greedy, sampled = keys[0], keys[1:]
    def words(lang: str) -> str:
        return ", ".join(f"{_per_round(t, lang, k)} at {k}" for k in sampled)
    def compare(lang: str) -> bool:
        return all(t[lang][k]["accepted_per_round"] > t[lang][greedy]["accepted_per_round"] for k in sampled)
    more = all(compare(lang) for lang in LANGUAGES)
    if zh:
        per = "；".join(f"{'英文' if lang == 'en' else '中文'}：greedy {_per_round(t, lang, greedy)}，"
                       + "，".join(f"温度 {k} 为 {_per_round(t, lang, k)}" for k in sampled)
                       for lang in LANGUAGES)
        verdict = "两种语言里按温度采样都比 greedy 接受得多" if more else "按温度采样并不总比 greedy 接受得多"
        return f"每轮平均接受的候选数，{per}。{verdict}。\n"
    per = "; ".join(f"{LANGUAGES[lang]}: {_per_round(t, lang, greedy)} greedy, {words(lang)}"
                    for lang in LANGUAGES)
    verdict = ("in both languages sampling accepts more than greedy decoding" if more else
               "sampling does not always accept more than greedy decoding")
    return f"Draft tokens accepted per round ({per}): {verdict}.\n"


def speed_summary(zh: bool = False) -> str:
    m = measurements()
    ratio = {lang: m["speed"][lang]["speculative k=4"]["wall_s"] / m["speed"][lang]["plain"]["wall_s"]
             for lang in LANGUAGES}
    faster = all(r < 1 for r in ratio.values())
    slower = all(r > 1 for r in ratio.values())
    if zh:
        verdict = "比普通解码快" if faster else "比普通解码慢" if slower else "一种语言快、一种慢"
        return (f"在这块 CPU（{m['cpu']}，{m['threads']} 个线程）上，宽度 4 的投机解码用时是普通解码的 "
                f"{ratio['en']:.2f} 倍（英文）和 {ratio['zh']:.2f} 倍（中文）：{verdict}。\n")
    verdict = "faster than plain decoding" if faster else "slower than plain decoding" if slower else \
        "faster in one language and slower in the other"
    return (f"On this CPU ({m['cpu']}, {m['threads']} thread{'s' if m['threads'] > 1 else ''}) speculative "
            f"decoding at width 4 takes {ratio['en']:.2f} times the time of plain decoding in English and "
            f"{ratio['zh']:.2f} times in Chinese: it is {verdict}.\n")


ZH_KINDS = {"word start": "词首", "word piece": "词的后半", "line end": "换行", "punctuation": "标点",
            "Chinese": "汉字", "space": "空格"}


RANKED_KIND_TOKENS = 10  # a kind of token seen fewer times is left out of the ranking (too few to rank)


def agreement_summary(zh: bool = False) -> str:
    """Per language, the token kinds from the one the draft gets right most often to the least (kinds seen
    at least ``RANKED_KIND_TOKENS`` times)."""
    by_kind = measurements()["agreement_by_kind"]
    parts = []
    for lang, name in LANGUAGES.items():
        kinds = sorted(((k, v) for k, v in by_kind[lang].items() if v["tokens"] >= RANKED_KIND_TOKENS),
                       key=lambda item: -item[1]["share"])
        if zh:
            parts.append(("英文" if lang == "en" else "中文") + "：" +
                         "、".join(f"{ZH_KINDS.get(k, k)} {v['share']:.0%}" for k, v in kinds))
        else:
            parts.append(f"{name}: " + ", ".join(f"{k} {v['share']:.0%}" for k, v in kinds))
    if zh:
        return "按草稿猜对的比例从高到低（只算出现至少 10 次的种类），" + "；".join(parts) + "。\n"
    return ("From the kind the draft gets right most often to the least (kinds seen at least 10 times): "
            + "; ".join(parts) + ".\n")


ZH_LANGUAGES = {"en": "英文", "zh": "中文"}


def _shares(schedule: dict[str, Any], zh: bool) -> str:
    """What a batch of training text holds, from the record's ``shares``."""
    shares = schedule["shares"]
    if len(set(shares.values())) == 1:
        return "英文和中文窗口各占一半" if zh else "as many English windows as Chinese"
    if zh:
        return "配".join(f"{n} 个{ZH_LANGUAGES[lang]}窗口" for lang, n in shares.items())
    return " to ".join(f"{n} {LANGUAGES[lang]}" + (" windows" if i == 0 else "")
                       for i, (lang, n) in enumerate(shares.items()))


def recipe_summary(zh: bool = False) -> str:
    """How each model trained (steps, batch, the languages in a batch, dropout, the target's text the
    distilled draft learns from, compute), from the records."""
    target, draft = record("target")["schedule"], record("draft")["schedule"]
    rows = draft["generated_rows"]
    if zh:
        dropout = f"每层两条残差支路的输出上有 {target['dropout']} 的 dropout；" if target["dropout"] else ""
        continuations = "和 ".join(f"{n} 段{ZH_LANGUAGES[lang]}" for lang, n in rows.items())
        return (f"目标模型训练 {target['steps']} 步，每步 {target['batch']} 个 "
                f"{target['seq_len']} token 的窗口，{_shares(target, True)}；{dropout}"
                f"草稿模型训练 {draft['steps']} 步，每步 {draft['batch']} 个窗口，训练文本里"
                f"{_shares(draft, True)}；蒸馏的草稿还学目标模型 greedy 续写的 {continuations}"
                "（一半从文档开头续写：诗的题目和作者、剧本的标题）。"
                "矩阵乘法在 autocast 下用 bfloat16 算，权重和优化器状态是 float32。\n")
    dropout = (f", with dropout {target['dropout']} on the output of each layer's two residual branches"
               if target["dropout"] else "")
    continuations = " and ".join(f"{n} {LANGUAGES[lang]}" for lang, n in rows.items())
    return (f"The target trains {target['steps']} steps of {target['batch']} windows of {target['seq_len']} "
            f"tokens, {_shares(target, False)}{dropout}; the drafts train {draft['steps']} steps of "
            f"{draft['batch']} windows, their training text {_shares(draft, False)}; the distilled draft "
            f"also learns from the target's greedy continuations, {continuations} (half of them opening at "
            "a document's start: a poem's title and author, a play's title). Matrix products run in "
            "bfloat16 under autocast; the weights and the optimizer's state are float32.\n")


def reproduce_summary(zh: bool) -> str:
    """What the committed rerun of the target's first steps (``trained/target-check.json``) found."""
    check, made = read_json(TRAINED / "target-check.json"), record("target")
    points = sum(1 for item in check["compared"] if "held_out" in item["what"])
    worst = max(check["compared"], key=lambda item: abs(item["rerun"] - item["recorded"]) / item["recorded"])
    where = f"`{worst['what']}`, {worst['rerun']} against the recorded {worst['recorded']}"
    where_zh = f"`{worst['what']}`，重训得 {worst['rerun']}，记录为 {worst['recorded']}"
    losses = max(abs(item["rerun"] - item["recorded"]) / item["recorded"]
                 for item in check["compared"] if item["what"].endswith(": loss"))
    verdict_zh = "在 2% 以内" if check["passed"] else "**超出** 2%"
    verdict = "within 2%" if check["passed"] else "**more than** 2% off"
    tokenizer_zh = "相同" if check["same_tokenizer"] else "**不同**"
    tokenizer = "identical" if check["same_tokenizer"] else "**different**"
    if zh:
        return (f"仓库里记下的一次复查：`{check['command']}` 在 {check['cpu']} 上"
                f"（{check['threads']} 个线程）重训了前 {check['steps']} 步（记录来自 {made['cpu']}），"
                f"比较了 {len(check['compared'])} 个数（其中 {points} 个是留出集每字符比特数），"
                f"最大相差 {check['largest_difference']:.2%}（{where_zh}），{verdict_zh}，"
                f"训练损失之间最多差 {losses:.2%}；tokenizer {tokenizer_zh}"
                "（`trained/target-check.json`）。\n")
    return (f"A rerun the repository records: `{check['command']}` on {check['cpu']} ({check['threads']} "
            f"threads) retrained the first {check['steps']} steps (the record comes from {made['cpu']}) and "
            f"compared {len(check['compared'])} figures ({points} of them held-out bits per character): the "
            f"largest difference is {check['largest_difference']:.2%} ({where}), {verdict}, and the training "
            f"losses differ by at most {losses:.2%}; the tokenizer is "
            f"{tokenizer} (`trained/target-check.json`).\n")


def _command(path: str) -> Callable[[], str]:
    return lambda: run_shell(COMMANDS[path])


OUTPUTS: dict[str, Callable[[], str]] = {
    "trained/models.md": models_table,
    "trained/targets.md": targets_table,
    **{f"trained/{name}-summary{suffix}.md": (lambda f=f, zh=zh: f(zh))
       for name, f in (("widths", widths_summary), ("drafts", drafts_summary),
                       ("agreement", agreement_summary), ("temperatures", temperatures_summary),
                       ("speed", speed_summary), ("recipe", recipe_summary),
                       ("reproduce", reproduce_summary))
       for suffix, zh in (("", False), (".zh", True))},
    "trained/corpora.md": corpora_table,
    "trained/widths.md": widths_table,
    "trained/temperatures.md": temperatures_table,
    "trained/drafts.md": drafts_table,
    "trained/speed.md": speed_table,
    "trained/agreement.md": agreement_table,
    "trained/repetition.md": repetition_table,
    **{path: _command(path) for path in COMMANDS},
}
