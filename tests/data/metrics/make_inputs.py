#!/usr/bin/env python3
"""Makes the metric test inputs (PROVENANCE.md) from the shared data; stdlib only, seeded.

  python3 tests/data/metrics/make_inputs.py ADVERTISEGEN_DEV_JSON ALPACA_ZH_DEMO_JSON

predictions.jsonl: generated_predictions.jsonl-style {"prompt", "predict", "label"} lines; labels
are AdvertiseGen summaries, predictions perturbed copies (characters dropped, swapped or replaced,
clauses shuffled, English and punctuation mixed in, sentence ends that rouge-chinese splits on)
plus empty, blank and unrelated predictions. segment.txt: one text a line for jieba.
"""
import json
import random
import sys

EXTRA = ["iPhone 15 Pro", "T恤", "AT&T", "3.5%", "C++", "hello-world", "v2.0", "100%纯棉",
         "Wi-Fi", "e_mail", "#热卖#", "OK", "...", "……", "！！", "？”", "。’", "\t", "\r\n", "  "]
HAN = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严"


def perturb(rng, text):
    chars = list(text)
    kind = rng.randrange(8)
    if kind == 0:  # drop characters
        chars = [c for c in chars if rng.random() > 0.15]
    elif kind == 1:  # replace characters
        chars = [rng.choice(HAN) if rng.random() < 0.15 else c for c in chars]
    elif kind == 2:  # shuffle the clauses
        parts = text.replace("。", "，").split("，")
        rng.shuffle(parts)
        chars = list("，".join(parts))
    elif kind == 3:  # swap neighbours
        for _ in range(len(chars) // 6):
            i = rng.randrange(max(1, len(chars) - 1))
            chars[i:i + 2] = chars[i:i + 2][::-1]
    elif kind == 4:  # truncate
        chars = chars[: rng.randrange(1, max(2, len(chars)))]
    elif kind == 5:  # keep it as it is
        pass
    else:  # insert English, numbers, whitespace and sentence-end punctuation
        for _ in range(rng.randrange(1, 5)):
            chars.insert(rng.randrange(len(chars) + 1), rng.choice(EXTRA))
    return "".join(chars)


def main():
    dev = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
    alpaca = json.load(open(sys.argv[2], encoding="utf-8"))
    rng = random.Random(18)
    rows = []
    for i, ex in enumerate(dev[:160]):
        label = ex["summary"]
        pred = perturb(rng, label)
        if i % 40 == 7:
            pred = ""
        elif i % 40 == 19:
            pred = " \n "
        elif i % 40 == 29:
            pred = dev[-1 - i]["summary"]  # an unrelated text
        elif i % 40 == 33:
            pred = "The dress is simple and elegant. It suits every occasion!"
        rows.append({"prompt": ex["content"], "predict": pred, "label": label})
    # English labels and Chinese labels with English and blank lines (alpaca_zh_demo outputs).
    for ex in alpaca[:40]:
        label = ex["output"]
        rows.append({"prompt": ex["instruction"], "predict": perturb(rng, label), "label": label})
    # Edge cases: rouge-chinese's sentence cuts (repeated ends, "......", "……", closing quotes,
    # blank sentences), Unicode spaces, non-BMP and full-width characters, "\r\n", empty label.
    tricky = [("？？？好的。", "好的？！好的"), ("......然后……”结束", "然后......结束……了"),
              ("他说：“好。”然后走了。", "他说：“好！”然后。"), ("。 \n。 ", "。。"),
              ("\u3000全角\u00a0空格\u2028行", "全角 空格"), ("😀表情ＡＢＣ１２３", "表情ＡＢＣ"),
              ("第一行\r\n第二行", "第一行\n第二行"), ("abc", ""), ("", ""),
              ("價格 3.5% 的 iPhone15", "价格3.5%的iPhone 15")]
    for p, l in tricky:
        rows.append({"prompt": "edge case", "predict": p, "label": l})
    with open("predictions.jsonl", "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    lines = [ex["summary"] for ex in dev[200:400]]
    for ex in alpaca[100:250]:
        lines += [ex["instruction"]] + [l for l in ex["output"].split("\n") if l.strip()][:2]
    lines += [perturb(rng, ex["summary"]) for ex in dev[400:450]]
    with open("segment.txt", "w", encoding="utf-8", newline="\n") as f:
        for l in lines:
            f.write(l.replace("\r", " ").replace("\n", " ") + "\n")


if __name__ == "__main__":
    main()
