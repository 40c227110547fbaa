"""The sentences under the trained-models page's tables, in English and in Chinese, from one set of numbers.

Scope: one function per sentence (acceptance by width, by draft and by temperature, speed against plain
decoding, which token kinds the draft gets right, how each model trained, what the committed rerun found),
each taking ``zh`` for the Chinese; where a sentence is one template with numbers, its two languages stand
side by side in ``words.toml`` (table ``sentences``; the Chinese names of the drafts, token kinds and plays
beside it). Never typed by hand. Non-scope: the tables (``gen_trained.py``), the records (``committed.py``).
"""

from __future__ import annotations

from typing import Any

from site_scripts.build.common import phrases, read_json
from site_scripts.trained.committed import LANGUAGES, TRAINED, agreed, measurements, per_round, record, share
from training.check import TOLERANCE


def _per_round(table: dict[str, Any], lang: str, key: str) -> str:
    return f"{per_round(table[lang][key]):.2f}"


PHRASES = phrases(__name__)  # in words.toml, each phrase in English and in Chinese
SENTENCES = PHRASES["sentences"]  # filled from the same numbers in both languages


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


ZH_DRAFTS = PHRASES["zh_drafts"]


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


ZH_KINDS = PHRASES["zh_kinds"]


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


def _shares(schedule: dict[str, Any], zh: bool) -> str:
    """What a batch of training text holds, from the record's ``shares``."""
    shares = schedule["shares"]
    if len(set(shares.values())) == 1:
        return "英文和中文窗口各占一半" if zh else "as many English windows as Chinese"
    if zh:
        names = SENTENCES["zh"]["language"]
        return "配".join(f"{n} 个{names[lang]}窗口" for lang, n in shares.items())
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


ZH_PLAYS = PHRASES["zh_plays"]


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
