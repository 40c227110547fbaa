"""The fifteen exercises: for each lesson, the engine's function(s) the learner writes and their hints.

Scope: the table :data:`EXERCISES` and :func:`exercise` (one by lesson number, or a one-line error). Titles
and section names are the lesson pages' own (a test holds them to the pages' headings). Non-scope: the
checks (``checks/lesson_NN.py``), the starter's text (``starter.py``).
"""

from __future__ import annotations

from .exercise import Exercise
from .words import Words

CORE = "mini_deepinfer.core"

EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        1, Words("The life of one request", "一条请求的一生"), "lessons/01-life-of-a-request",
        (f"{CORE}.commit:commit_tokens", f"{CORE}.engine:Engine.commit_sampled"), True,
        Words("append the round's tokens to the output one at a time, checking the stop after each; keep the "
              "rest as discarded; then record the commit group, the time of the first token and the trace "
              "events, and finish the request if a token stopped it.",
              "把这一轮的 token 逐个追加到输出，每追加一个就检查一次停止条件，其余的算作丢弃；"
              "然后记下提交组、首个 token 的时间和 trace 事件，若某个 token 让请求停止就结束它。"),
        Words("lesson 1's demo (also with --pipeline, a cancel, a batch, several tokens a round) equal to "
              "the engine's line by line; tokens committed in order and each once, none after a stop; every "
              "token a round hands back committed or discarded; one commit group a round, as step() delivers "
              "it; the first token's time set once; the cache holding prompt + output[:-1]; every slot "
              "returned.",
              "第 1 课的演示（以及 --pipeline、取消、合批、一轮多个 token）与引擎逐行一致；"
              "token 按顺序提交、每个只提交一次，停止之后不再提交；一轮交回的每个 token 要么提交要么丢弃；"
              "每轮一个提交组，与 step() 交付的一致；首个 token 的时间只记一次；"
              "缓存里是 prompt + output[:-1]；所有槽位归还。"),
        ("commit", Words("Result processing: the commit", "结果处理：提交")), "lesson_01"),
    Exercise(
        2, Words("Stopping and giving back", "停止与归还"), "lessons/02-stopping-and-giving-back",
        (f"{CORE}.commit:stop_reason", f"{CORE}.engine:Engine.release_if_idle"), True,
        Words("stop_reason: eos first (unless ignore_eos), then length. release_if_idle: give a finished "
              "request's KV slots and state slot back exactly once, and only when no launched round still "
              "uses them; tell the prefix cache and the runner.",
              "stop_reason：先看 eos（ignore_eos 时不看），再看长度。release_if_idle：已结束请求的 KV 槽位"
              "和状态槽位只归还一次，并且只在没有已发出的轮次还在用它们时归还；同时告诉前缀缓存和 runner。"),
        Words("lesson 2's demo and every way to stop (eos, length, cancel, an ignored eos, a prefix cache), "
              "with and without cross-round execution, equal to the engine's; each output ends at its first "
              "stop; free == capacity when nothing runs; no slot given back while a round in flight uses it, "
              "none kept once none does; the runner told once per request.",
              "第 2 课的演示与各种停止方式（eos、长度、取消、忽略 eos、前缀缓存）在同步与跨轮下都与引擎一致；"
              "每个输出停在第一个停止条件上；没有请求时 free == capacity；在飞行中的轮次还在用的槽位不归还，"
              "不再有轮次用时不再占着；每条请求只告诉 runner 一次。"),
        ("finish-release", Words("Finishing and giving back are two steps", "结束与归还是两步")),
        "lesson_02"),
    Exercise(
        3, Words("Batching under a token budget", "在 token 预算下合批"), "lessons/03-batching",
        (f"{CORE}.batch:BatchEngine.schedule",), True,
        Words("fill one round: first one decode token for every running request whose prompt is done (while "
              "the budget lasts), then prompt tokens: chunked prompts already started, then waiting requests "
              "in arrival order, admitting each before its first chunk; a request that cannot start stops "
              "the queue.",
              "排满一轮：先给每个 prompt 已算完的运行中请求一个 decode token（预算够就给），"
              "再排 prompt 的 token：先排已经开始分块的 prompt，再按到达顺序排等待中的请求，"
              "每条在第一块之前先准入；一条请求排不上就挡住后面的队列。"),
        Words("the A/B/C scenario's plans round by round equal to the engine's; no round over the budget or "
              "max_num_seqs; decodes before prompts; arrival order kept; every slot returned.",
              "A/B/C 场景的每轮计划与引擎一致；没有一轮超出预算或 max_num_seqs；"
              "decode 在 prompt 之前；保持到达顺序；所有槽位归还。"),
        ("schedule", Words("How a round is filled", "一轮怎样排")), "lesson_03"),
    Exercise(
        4, Words("Chunked prefill", "分块 prefill"), "lessons/04-chunked-prefill",
        (f"{CORE}.batch:BatchEngine._chunk_size", f"{CORE}.engine:Engine.plan_prefill"), True,
        Words("_chunk_size: how many of a request's remaining prompt tokens run this round (a waiting "
              "request only if max_num_seqs and the cache admit it, starting after its cached prefix; the "
              "whole rest if it fits, else the budget with chunked prefill, else 0). plan_prefill: the next "
              "n prompt tokens, sampling only with the chunk that ends the prompt.",
              "_chunk_size：这一轮跑请求剩余 prompt 的多少个 token（等待中的请求要在 max_num_seqs "
              "和缓存都允许时才能准入，并从缓存的前缀之后开始；剩下的放得下就全放，否则开了分块就用掉预算，"
              "否则为 0）。plan_prefill：接下来的 n 个 prompt token，只有结束 prompt 的那一块才采样。"),
        Words("the A/B/C demo, its chunking variants and two stateful runs equal to the engine's line by "
              "line; only the last chunk samples; chunks cover the prompt in order with no gap or overlap; "
              "no round over the budget; tokens equal to an unchunked run; every slot returned.",
              "A/B/C 演示、它的分块变体和两个带状态的运行与引擎逐行一致；只有最后一块采样；"
              "各块按顺序覆盖整个 prompt，不重不漏；没有一轮超出预算；token 与不分块的运行相同；"
              "所有槽位归还。"),
        ("chunk-size", Words("How much to cut", "切多少")), "lesson_04"),
    Exercise(
        5, Words("The runner: from a round plan to tensors", "Runner：从轮计划到张量"), "lessons/05-runner",
        ("mini_deepinfer.runtime.staging:stage_round",), False,
        Words("turn the round's sequences into the staged inputs: token ids, positions, the KV slot of "
              "every position, the context of each sequence, the state slots, and the rows whose logits are "
              "sampled.",
              "把这一轮的各条序列变成暂存的输入：token id、位置、每个位置的 KV 槽位、每条序列的上下文、"
              "状态槽位，以及要采样 logits 的行。"),
        Words("the staged tensors equal to the engine's for prefill, decode and mixed rounds (also "
              "cross-round, prefix cache, speculative and graph rounds); the model's tokens equal to the "
              "engine's; positions, slot mapping, fresh slots and logits rows as the plan says; each "
              "request's tokens as when it runs alone.",
              "prefill、decode 与混合轮次（以及跨轮、前缀缓存、投机与图的轮次）暂存的张量与引擎一致；"
              "模型产出的 token 与引擎一致；位置、slot mapping、fresh 槽位与 logits 行符合计划；"
              "每条请求的 token 与单独运行时相同。"),
        ("prepare", Words("From plan to tensors", "从计划到张量")), "lesson_05"),
    Exercise(
        6, Words("Qwen3.5's two kinds of layer", "Qwen3.5 的两种层"), "lessons/06-qwen35-layers",
        ("mini_deepinfer.models.kernels.deltanet:recurrent_delta_step",
         "mini_deepinfer.models.qwen3_5:GatedDeltaNet.split_heads"), False,
        Words("recurrent_delta_step: one decode step of the gated delta rule: decay the state, correct it by "
              "the error of its prediction for the new key, and read it with the query. split_heads: cut "
              "[q | k | v] into heads, L2-normalise q and k, scale q by dk^-0.5, repeat key heads for "
              "the value heads.",
              "recurrent_delta_step：门控 delta 规则的一步 decode：让状态衰减，"
              "用它对新 key 的预测误差修正它，再用 query 读出。split_heads：把 [q | k | v] 切成多个头，"
              "对 q 和 k 做 L2 归一化，q 乘以 dk^-0.5，key 头重复以对应 value 头。"),
        Words("a tiny Qwen3.5's greedy tokens and logits through the engine equal the engine's (plain and "
              "speculative); outputs and new states equal to the engine's step and to the plain reference; "
              "the engine's heads, unit keys; decoding after a prefill equal to a whole prefill.",
              "小 Qwen3.5 经引擎得到的 greedy token 与 logits 与引擎一致（普通与投机解码）；输出与新状态与"
              "引擎的一步及朴素参考实现一致；切出的头与引擎一致，key 长度为 1；prefill 后逐个 decode 与整段 "
              "prefill 一致。"),
        ("delta-rule", Words("One step of the delta rule", "delta 规则的一步")), "lesson_06"),
    Exercise(
        7, Words("HybridCache", "HybridCache"), "lessons/07-hybrid-cache",
        ("mini_deepinfer.models.kernels.deltanet:causal_conv_with_window",), False,
        Words("the causal convolution of a chunk that continues a window: prepend the window, convolve, "
              "write the outputs into out= when given, apply SiLU, and return the outputs and the new window "
              "(the last kernel - 1 inputs).",
              "接着窗口的一块做因果卷积：把窗口接在前面，卷积，给了 out= 就把输出写进去，再做 SiLU，"
              "返回输出和新的窗口（最后 kernel - 1 个输入）。"),
        Words("a tiny Qwen3.5's tokens and logits equal to the engine's; outputs and windows equal to the "
              "engine's, to F.conv1d and to the last kernel - 1 inputs; chunked prefill equal to whole "
              "prefill.",
              "小 Qwen3.5 的 token 与 logits 与引擎一致；输出与窗口与引擎、F.conv1d 以及最后 kernel - 1 "
              "个输入一致；分块 prefill 与整段 prefill 一致。"),
        ("window", Words("The convolution window across chunks", "卷积窗口跨块")), "lesson_07"),
    Exercise(
        8, Words("Sampling", "采样"), "lessons/08-sampling",
        ("mini_deepinfer.runtime.sampling:_distribution",), False,
        Words("one row's sampling distribution: divide by the temperature (after subtracting the maximum), "
              "keep the top-k, then the smallest set of tokens whose probability reaches top-p, and return "
              "the kept tokens and their probabilities, summing to 1.",
              "一行的采样分布：（先减去最大值）除以温度，保留 top-k，再保留概率之和达到 top-p 的最小集合，"
              "返回保留的 token 及其概率，概率之和为 1。"),
        Words("seeded samples through the engine and the demo's draws equal to the engine's; the "
              "distribution equal to the engine's and to the lesson's filter under every setting; kept "
              "probabilities summing to 1; a tiny temperature stays finite.",
              "经引擎的固定种子采样与演示的抽取与引擎一致；各种设置下分布与引擎及本课所说的过滤一致；"
              "保留的概率之和为 1；很小的温度也不溢出。"),
        ("filter", Words("Filtering: temperature, top-k, top-p", "过滤：温度、top-k、top-p")), "lesson_08"),
    Exercise(
        9, Words("Checkpoints and text", "检查点与文本"), "lessons/09-weights-and-text",
        ("mini_deepinfer.models.loader:parameter_name", "mini_deepinfer.models.loader:load_checkpoint"),
        False,
        Words("parameter_name: map a checkpoint's tensor name to our parameter name: the text model's prefix "
              "goes, the vision tower and the multi-token-prediction head are skipped. load_checkpoint: read "
              "config.json, index the tensors of the weight files, check them against a model built on the "
              "meta device before reading any weight, then build the model and copy the weights in.",
              "parameter_name：把检查点里的张量名映射成我们的参数名：去掉文本模型的前缀，"
              "跳过视觉塔和多 token 预测头。load_checkpoint：读 config.json，索引权重文件里的张量，"
              "在读任何权重之前先对照 meta 设备上建的模型检查，再建模型并把权重拷进去。"),
        Words("every name of a Qwen3.5 and a Qwen2 checkpoint mapped as the engine maps it and by the "
              "lesson's rule; the loaded models equal to the engine's (float32 and bfloat16); a checkpoint "
              "with an unknown tensor or a wrong shape refused as the engine refuses it.",
              "Qwen3.5 与 Qwen2 检查点的每个名字都与引擎映射得一样、符合本课的规则；加载出的模型与引擎一致"
              "（float32 与 bfloat16）；含未知张量或形状不对的检查点与引擎一样被拒绝。"),
        ("loader", Words("Loading a checkpoint", "加载检查点")), "lesson_09"),
    Exercise(
        10, Words("Cross-round execution", "跨轮执行"), "lessons/10-cross-round",
        (f"{CORE}.engine:Engine.step",), True,
        Words("one round: schedule, launch the plan if it has sequences, then read either the round just "
              "launched (synchronous) or the one launched before (cross-round, through the pipeline's swap); "
              "a runner failure abandons what is in flight; commit what was read.",
              "一轮：调度，计划非空就发出，然后读回刚发出的那一轮（同步）或上一轮发出的"
              "（跨轮，经流水线的 swap）；runner 出错就放弃在飞行中的工作；提交读回的结果。"),
        Words("lesson 10's and lesson 1's demos, A/B/C, late arrivals and runner failures, synchronous and "
              "cross-round, equal to the engine's; cross-round tokens equal to synchronous ones; every "
              "launched round read exactly once, in its own step or the next; step() returning what it "
              "committed; a runner failure ending exactly the requests in flight as error; every slot "
              "returned.",
              "第 10 课与第 1 课的演示、A/B/C、晚到的请求与 runner 出错，同步与跨轮都与引擎一致；"
              "跨轮的 token 与同步相同；每个发出的轮次恰好读回一次，在本步或下一步；step() 返回它提交的内容；"
              "runner 出错时恰好让在飞行中的请求以 error 结束；所有槽位归还。"),
        ("step-swap", Words("Launch first, then read the previous round", "先发出，再读上一轮")),
        "lesson_10"),
    Exercise(
        11, Words("Stops, cancellation and release across rounds", "跨轮的停止、取消与归还"),
        "lessons/11-stops-across-rounds",
        (f"{CORE}.engine:Engine.commit_round",), True,
        Words("for each sequence of a round just read: one round fewer in flight; if it sampled, one sample "
              "fewer in flight, and commit its tokens unless the request already finished (then discard "
              "them); index its prompt; give its slots back if it is idle.",
              "对刚读回的一轮里的每条序列：在飞行中的轮数减一；若它采样了，在飞行中的采样数减一，"
              "请求未结束就提交它的 token（已结束就丢弃）；索引它的 prompt；空闲就归还槽位。"),
        Words("lesson 11's demo, other cancels, every kind of stop in a batch and a prefix cache, across "
              "rounds and synchronously, equal to the engine's; nothing committed after a stop; every token "
              "read committed or discarded as stale; the in-flight counts equal to the unread rounds; slots "
              "returned only after the last round that uses them is read, and right then; free == capacity "
              "at the end.",
              "第 11 课的演示、其他时机的取消、合批中的各种停止与前缀缓存，跨轮与同步都与引擎一致；"
              "停止后不再提交；读回的每个 token 要么提交要么作为过期工作丢弃；"
              "在飞行中的计数等于未读回的轮次；槽位只在最后一个用到它们的轮次读回后归还，并且就在那时归还；"
              "最后 free == capacity。"),
        ("commit-round", Words("On reading: commit, discard, release", "读回时：提交、丢弃、归还")),
        "lesson_11"),
    Exercise(
        12, Words("Speculative decoding", "投机解码"), "lessons/12-speculative",
        ("mini_deepinfer.runtime.speculative.verify:verify_greedy",), False,
        Words("greedy verification: the longest prefix of the drafts equal to the target's argmax, then the "
              "target's own next token (the correction, or the bonus when every draft matched).",
              "greedy 验证：草稿中与目标模型 argmax 相同的最长前缀，再加目标模型自己的下一个 token"
              "（不一致处的更正，或全部接受时的额外 token）。"),
        Words("the demos' rounds and a batched crowd equal to the engine's, groups and all; speculative "
              "greedy tokens equal to plain greedy; each group the accepted drafts plus one target token; "
              "every slot of both caches returned.",
              "演示的每一轮和一组合批请求与引擎一致（包括接受的 token 组）；"
              "投机 greedy 的 token 与普通 greedy 相同；每组是被接受的草稿加目标模型的一个 token；"
              "两份缓存的所有槽位都归还。"),
        ("runner", Words("The runner: draft, one verify, decide", "Runner：草稿、一次验证、判定")),
        "lesson_12"),
    Exercise(
        13, Words("After a rejection: restoring both caches", "拒绝之后：恢复两份缓存"),
        "lessons/13-restoring-caches",
        ("mini_deepinfer.core.speculative:SpeculativeEngine.rollback",
         "mini_deepinfer.runtime.speculative.runner:SpeculativeRunner.rewind"), False,
        Words("rollback: keep prompt + output[:-1] positions, rewind the runner to that length and give the "
              "rejected positions' KV slots back. rewind: the target's state slot takes the snapshot after "
              "the last kept position (none is needed when every draft was accepted); the draft follows.",
              "rollback：保留 prompt + output[:-1] 个位置，让 runner 回退到这个长度，"
              "并归还被拒绝位置的 KV 槽位。rewind：目标模型的状态槽位取最后一个保留位置之后的快照"
              "（全部接受时不需要）；草稿模型随后跟上。"),
        Words("the rejection demo's rounds equal to the engine's; speculative tokens equal to plain greedy; "
              "after every round both caches (KV, convolution window, recurrent state) equal a cold "
              "recompute of the committed prefix and no snapshot is left; every slot returned.",
              "拒绝演示的每一轮与引擎一致；投机解码的 token 与普通 greedy 相同；"
              "每轮之后两份缓存（KV、卷积窗口、递归状态）都等于对已提交前缀的冷重算，且不留快照；"
              "所有槽位归还。"),
        ("three-parts", Words("Three things go back to the committed prefix", "三样东西要回到已提交的前缀")),
        "lesson_13"),
    Exercise(
        14, Words("Probabilistic acceptance and resampling", "概率接受与补采样"),
        "lessons/14-probabilistic-acceptance",
        ("mini_deepinfer.runtime.speculative.verify:verify_sampled",), False,
        Words("accept draft i with probability min(1, p(d)/q(d)); at the first rejection draw from "
              "norm(max(0, p - q)) and stop; when all are accepted draw a bonus token from the last p.",
              "以 min(1, p(d)/q(d)) 的概率接受第 i 个草稿；第一次拒绝时从 norm(max(0, p - q)) 中抽取并停止；"
              "全部接受时从最后一个 p 抽取额外 token。"),
        Words("seeded groups and acceptance tests equal to the engine's (the demo, a batched crowd, a "
              "five-token vocabulary); each group stops at the first rejection; the delivered tokens "
              "distributed as the target alone (chi-square tests at 1e-3 each).",
              "固定种子下的 token 组与接受检验与引擎一致（演示、一组合批请求、五个 token 的小词表）；"
              "每组在第一次拒绝处停止；交付的 token 服从目标模型单独采样的分布（卡方检验，每项 1e-3）。"),
        ("verify-sampled", Words("Accept, reject, resample", "接受、拒绝与补采样")), "lesson_14"),
    Exercise(
        15, Words("The prefix cache: reusing a prompt's start", "前缀缓存：复用 prompt 的开头"),
        "lessons/15-prefix-cache",
        (f"{CORE}.prefix_cache:PrefixCache.match", f"{CORE}.prefix_cache:PrefixCache.insert"), True,
        Words("match: the longest reusable prefix (whole blocks, then a cached tail), leaving one token to "
              "compute. insert: index the computed blocks of a prompt, sharing their KV slots and keeping "
              "(or giving back) the snapshot at each block end.",
              "match：最长的可复用前缀（整块，再加一个缓存的尾巴），至少留一个 token 要算。"
              "insert：把 prompt 已算好的块放进索引，共享它们的 KV 槽位，并在每个块末保留（或归还）快照。"),
        Words("traces, hits and the index equal to the engine's; no reuse of an unsaved state; tokens equal "
              "with and without the prefix cache; every KV slot and snapshot slot returned after "
              "clear_prefix_cache.",
              "trace、命中与索引都与引擎一致；不复用未保存的状态；有无前缀缓存 token 相同；"
              "clear_prefix_cache 之后所有 KV 槽位与快照槽位都归还。"),
        ("index", Words("The index: hashed blocks of tokens", "索引：按 token 哈希的 block")), "lesson_15"),
)


def exercise(lesson: int) -> Exercise:
    """The exercise of ``lesson`` (1 to 15); a ValueError with one line for any other number."""
    for candidate in EXERCISES:
        if candidate.lesson == lesson:
            return candidate
    raise ValueError(f"no exercise for lesson {lesson}: the lessons are 1 to {len(EXERCISES)}")
