"""The sentences under the trained-models page's tables, in English and in Chinese, from one set of numbers.

Scope: one function per sentence (acceptance by width, by draft and by temperature, speed against plain
decoding, which token kinds the draft gets right, how each model trained, what the committed rerun found),
each taking ``zh`` for the Chinese; where a sentence is one template with numbers, its two languages stand
side by side in ``SENTENCES``. Never typed by hand. Non-scope: the tables (``gen_trained.py``), the records
(``committed.py``).
"""

from __future__ import annotations

from typing import Any

from site_scripts.build.common import by_language, read_json
from site_scripts.trained.committed import LANGUAGES, TRAINED, agreed, measurements, per_round, record, share
from training.check import TOLERANCE


def _per_round(table: dict[str, Any], lang: str, key: str) -> str:
    return f"{per_round(table[lang][key]):.2f}"


SENTENCES = by_language({  # each sentence in English, then in Chinese, filled from the same numbers
    "widths": ("At width 1 the draft's token is accepted {one_en} of the time in English and {one_zh} in "
               "Chinese; at width 4 a round accepts {four_en} (English) and {four_zh} (Chinese) draft "
               "tokens on average, at width 8 {eight_en} and {eight_zh}.\n",
               "宽度 1 时，草稿的 token 在英文里有 {one_en} 被接受，中文里有 {one_zh}；宽度 4 "
               "时每轮平均接受 {four_en}（英文）和 {four_zh}（中文）个候选，宽度 8 时是 {eight_en} 和 "
               "{eight_zh}。\n"),
    "speed": ("On this CPU ({cpu}, {threads} thread{plural}) speculative decoding at width 4 takes {en} "
              "times the time of plain decoding in English and {zh} times in Chinese: it is {verdict}.\n",
              "在这块 CPU（{cpu}，{threads} 个线程）上，宽度 4 的投机解码用时是普通解码的 {en} 倍（英文）"
              "和 {zh} 倍（中文）：{verdict}。\n"),
    "faster": ("faster than plain decoding",
               "比普通解码快"),
    "slower": ("slower than plain decoding",
               "比普通解码慢"),
    "mixed": ("faster in one language and slower in the other",
              "一种语言快、一种慢"),
    "recipe": ("The target trains {steps} steps of {batch} windows of {seq_len} tokens, "
               "{target_shares}{dropout}; the drafts train {draft_steps} steps of {draft_batch} windows, "
               "their training text {draft_shares}; the distilled draft also learns from the target's "
               "greedy continuations, {continuations} (half of them opening at a document's start: a "
               "poem's title and author, a play's title). Matrix products run in bfloat16 under autocast; "
               "the weights and the optimizer's state are float32.\n",
               "目标模型训练 {steps} 步，每步 {batch} 个 {seq_len} token 的窗口，{target_shares}；"
               "{dropout}草稿模型训练 {draft_steps} 步，每步 {draft_batch} 个窗口，"
               "训练文本里{draft_shares}；蒸馏的草稿还学目标模型 greedy 续写的 "
               "{continuations}（一半从文档开头续写：诗的题目和作者、剧本的标题）。矩阵乘法在 autocast "
               "下用 bfloat16 算，权重和优化器状态是 float32。\n"),
    "dropout": (", with dropout {p} on the output of each layer's two residual branches",
                "每层两条残差支路的输出上有 {p} 的 dropout；"),
    "continuation": ("{n} {language}",
                     "{n} 段{language}"),
    "and": (" and ",
            "和 "),
    "language": ({"en": "English", "zh": "Chinese"},
                 {"en": "英文", "zh": "中文"}),
    "reproduce": ("A rerun the repository records: `{command}` on {cpu} ({threads} threads) retrained the "
                  "first {steps} steps (the record comes from {recorded_cpu}) and compared {compared} "
                  "figures ({points} of them held-out bits per character): the largest difference is "
                  "{largest} ({where}), {verdict}, and the training losses differ by at most {losses}; the "
                  "tokenizer is {tokenizer} (`trained/target-check.json`).\n",
                  "仓库里记下的一次复查：`{command}` 在 {cpu} 上（{threads} 个线程）重训了前 {steps} "
                  "步（记录来自 {recorded_cpu}），比较了 {compared} 个数（其中 {points} "
                  "个是留出集每字符比特数），最大相差 {largest}（{where}），{verdict}，训练损失之间最多差 "
                  "{losses}；tokenizer {tokenizer}（`trained/target-check.json`）。\n"),
    "where": ("`{what}`, {rerun} against the recorded {recorded}",
              "`{what}`，重训得 {rerun}，记录为 {recorded}"),
    "passed": (("**more than** {tolerance} off", "within {tolerance}"),
               ("**超出** {tolerance}", "在 {tolerance} 以内")),
    "seeded": ("Training is seeded (the initialisation, the order of windows, dropout) and runs on the "
               "number of threads its record names ({threads} for the target). That it repeats exactly is "
               "not shown: the one recorded rerun ran on {threads_then} and {cpu_then} ({check_cpu}; the "
               "record comes from {cpu}), and its training losses came within {losses} of the record, its "
               "held-out bits per character within {largest} ([reproducing](#reproduce)).\n",
               "训练用了固定的种子（初始化、窗口顺序、dropout），线程数按记录里写的来（目标模型 {threads} "
               "个）。它能否完全重现，记录并没有证明：仓库记下的唯一一次复查用的是{threads_then}、{cpu_then}"
               "（{check_cpu}；记录来自 {cpu}），训练损失与记录相差最多 {losses}，留出集每字符比特数最多 "
               "{largest}（见[复现](#reproduce)）。\n"),
    "same_threads": (("{n} threads (the record: {m})", "the same {n} threads"),
                     ("{n} 个线程（记录里是 {m} 个）", "同样的 {n} 个线程")),
    "same_cpu": (("another CPU", "the same CPU"), ("另一种 CPU", "同一种 CPU")),
    "corpora": ("Of each training corpus, sorted by file name and position in the file, every {every}th "
                "document is held out ({plays_n} whole plays in English, {plays}; {poems} poems in "
                "Chinese) to measure the loss on text the model was not trained on; {train_en} English and "
                "{train_zh} Chinese documents are trained on. The two archives are {sizes}: {total} MB in "
                "all.\n",
                "每个训练语料里，按文件名和文件内位置排序后的每第 {every} 篇留出不训练（英文是 {plays_n} "
                "部完整的剧：{plays}；中文是 {poems} 首诗），用来计算留出集上的损失；训练用的是 {train_en} "
                "篇英文和 {train_zh} 篇中文。两个压缩包是 {sizes}，共 {total} MB。\n"),
    "play": ("*{title}*", "《{title}》"),
    "plays_and": (" and ", "和"),
    "sizes_and": (" and ", " 和 "),
    "same_tokenizer": (("**different**", "identical"),
                       ("**不同**", "相同")),
})


def widths_summary(zh: bool = False) -> str:
    w = measurements()["widths"]
    values = {f"{name}_{lang}": value for lang in LANGUAGES for name, value in
              (("one", f"{share(w[lang]['1'], 'accepted', 'proposed'):.0%}"),
               ("four", _per_round(w, lang, "4")),
               ("eight", _per_round(w, lang, "8")))}
    return SENTENCES["zh" if zh else "en"]["widths"].format(**values)


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
        return all(per_round(t[lang][k]) > per_round(t[lang][greedy]) for k in sampled)
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
    m, words = measurements(), SENTENCES["zh" if zh else "en"]
    ratio = {lang: m["speed"][lang]["speculative k=4"]["wall_s"] / m["speed"][lang]["plain"]["wall_s"]
             for lang in LANGUAGES}
    faster = all(r < 1 for r in ratio.values())
    slower = all(r > 1 for r in ratio.values())
    verdict = words["faster" if faster else "slower" if slower else "mixed"]
    return words["speed"].format(cpu=m["cpu"], threads=m["threads"], plural="s" if m["threads"] > 1 else "",
                                 en=f"{ratio['en']:.2f}", zh=f"{ratio['zh']:.2f}", verdict=verdict)


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
                       key=lambda item: -agreed(item[1]))
        if zh:
            parts.append(("英文" if lang == "en" else "中文") + "：" +
                         "、".join(f"{ZH_KINDS.get(k, k)} {agreed(v):.0%}" for k, v in kinds))
        else:
            parts.append(f"{name}: " + ", ".join(f"{k} {agreed(v):.0%}" for k, v in kinds))
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
    words = SENTENCES["zh" if zh else "en"]
    continuations = words["and"].join(words["continuation"].format(n=n, language=words["language"][lang])
                                      for lang, n in draft["generated_rows"].items())
    dropout = words["dropout"].format(p=target["dropout"]) if target["dropout"] else ""
    return words["recipe"].format(
        steps=target["steps"], batch=target["batch"], seq_len=target["seq_len"], dropout=dropout,
        target_shares=_shares(target, zh), draft_steps=draft["steps"], draft_batch=draft["batch"],
        draft_shares=_shares(draft, zh), continuations=continuations)


def reproduce_summary(zh: bool) -> str:
    """What the committed rerun of the target's first steps (``trained/target-check.json``) found."""
    check, made = read_json(TRAINED / "target-check.json"), record("target")
    words = SENTENCES["zh" if zh else "en"]
    points = sum(1 for item in check["compared"] if "held_out" in item["what"])
    worst = max(check["compared"], key=_off)
    losses = max(_off(item) for item in check["compared"] if item["what"].endswith(": loss"))
    return words["reproduce"].format(
        command=check["command"], cpu=check["cpu"], threads=check["threads"], steps=check["steps"],
        recorded_cpu=made["cpu"], compared=len(check["compared"]), points=points,
        largest=f"{check['largest_difference']:.2%}", where=words["where"].format(**worst),
        verdict=words["passed"][bool(check["passed"])].format(tolerance=f"{TOLERANCE:.0%}"),
        losses=f"{losses:.2%}",
        tokenizer=words["same_tokenizer"][bool(check["same_tokenizer"])])


def _off(item: dict[str, Any]) -> float:
    return abs(item["rerun"] - item["recorded"]) / item["recorded"]


def seeded_summary(zh: bool = False) -> str:
    """How far training repeats, as far as the records show: the seeds, the threads, the one rerun."""
    check, made = read_json(TRAINED / "target-check.json"), record("target")
    words = SENTENCES["zh" if zh else "en"]
    off = {kind: f"{max(_off(i) for i in check['compared'] if kind in i['what']):.2%}"
           for kind in (": loss", "held_out")}
    return words["seeded"].format(
        threads=made["threads"], check_cpu=check["cpu"], cpu=made["cpu"], losses=off[": loss"],
        largest=off["held_out"], cpu_then=words["same_cpu"][check["cpu"] == made["cpu"]],
        threads_then=words["same_threads"][check["threads"] == made["threads"]].format(
            n=check["threads"], m=made["threads"]))


ZH_PLAYS = {"Macbeth": "麦克白", "Twelfth Night": "第十二夜"}


def corpora_summary(zh: bool = False) -> str:
    """The split and the archives' sizes, from ``measurements.json``'s ``corpora``."""
    part, words = measurements()["corpora"], SENTENCES["zh" if zh else "en"]
    titles = [t.split(";")[0].title() for t in part["held_out_titles_en"]]
    plays = words["plays_and"].join(words["play"].format(title=ZH_PLAYS.get(t, t) if zh else t)
                                    for t in titles)
    sizes = words["sizes_and"].join(f"`{name}` {size / 1e6:.1f} MB"
                                    for name, size in part["archive_bytes"].items())
    docs = part["documents"]
    return words["corpora"].format(
        every=part["held_out_every"], plays_n=docs["held_out"]["en"], plays=plays,
        poems=docs["held_out"]["zh"], train_en=docs["train"]["en"], train_zh=docs["train"]["zh"], sizes=sizes,
        total=f"{sum(part['archive_bytes'].values()) / 1e6:.1f}")
