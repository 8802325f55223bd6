#!/usr/bin/env python3
"""Write gateway/tokenizer/testdata/refs/strings.json: the tokenizer parity inputs.

Deterministic (no randomness beyond a fixed LCG), so re-running gives the same
file. The strings aim at the places byte-level BPE implementations disagree:
the pre-tokenizer regex (whitespace runs, contractions, digits), NFC, special
tokens glued to text, and multi-byte UTF-8.
"""
import json
import os
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                   "..", "..", "gateway", "tokenizer", "testdata", "refs", "strings.json")


def lcg(seed):
    x = seed
    while True:
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        yield x >> 33


def main():
    s = []
    # Plain English and contractions.
    s += ["Hello world", "Hello, world!", " Hello world", "hello", "HELLO", "Hello  world",
          "I'm here", "you're", "they've", "she'll", "he'd", "it's", "IT'S", "We'Re", "don't stop",
          "can't won't shouldn't", "'s", "' s", "''", "rock 'n' roll", "O'Neil's dog's bowl",
          "The quick brown fox jumps over the lazy dog.",
          "A man, a plan, a canal: Panama.",
          "e.g. i.e. etc. vs. Mr. Mrs. Dr.",
          "supercalifragilisticexpialidocious",
          "antidisestablishmentarianism and pneumonoultramicroscopicsilicovolcanoconiosis"]
    # Whitespace runs.
    ws = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", " \n",
          "\n ", "  \n  ", "a  b", "a   b", "a\tb", "a\t\tb", "a\nb", "a\n\nb", "a \n b",
          "a  \n\n  b", "trailing   ", "   leading", "  both  ", "x\u00a0y", "x\u3000y",
          "tab\tthen  spaces   then\nnewline", "\n\n\nHello", "Hello\n\n\n", " \t \t ",
          "line1\r\nline2\r\n", "\v\f", "a\u2028b", "a\u2029b", "end with space "]
    s += ws
    # Digits.
    s += ["0", "1", "12", "123", "1234", "12345", "123456789", "3.14159", "1,000,000", "1e10",
          "-42", "+7", "0x1F", "2026-11-29", "12:34:56", "v1.2.3", "$100.00", "50%",
          "Call 555-0123 now", "a1b2c3", "x=10;y=20", "١٢٣", "一二三", "①②③", "Ⅷ",
          "9999999999999999999999"]
    # CJK and other scripts.
    s += ["你好，世界", "我喜欢吃苹果。", "東京タワー", "こんにちは世界", "カタカナ", "한국어 텍스트",
          "안녕하세요", "Привет, мир!", "Ελληνικά γράμματα", "עברית", "مرحبا بالعالم",
          "हिन्दी भाषा", "ภาษาไทย", "Tiếng Việt có dấu", "Zürich Straße Äpfel Öl",
          "naïve café résumé", "Ångström", "ﬁnancial ﬂow", "ǅemal", "İstanbul ıslak",
          "ქართული", "Հայերեն", "ኢትዮጵያ", "ᚠᚢᚦᚨᚱᚲ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚", "中文English混合text",
          "日本語とEnglishのmix", "Русский и English"]
    # Emoji and symbols.
    s += ["😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸🇯🇵", "❤️", "✨ sparkle ✨", "I ❤ Go",
          "→ ← ↑ ↓", "∑∫∂√∞", "©®™", "§¶†‡", "…", "—–-", "«quoted»", "“smart quotes”",
          "‘single’", "🤖 robots 🤖 everywhere", "🏳️‍🌈", "a😀b", "😀 😀", "\U0001F9D1\u200D\U0001F4BB"]
    # Odd unicode: combining marks, NFC/NFD, zero-width, BOM, private use.
    s += ["e\u0301", "cafe\u0301", "A\u030a", "n\u0303o", "\u1e9b\u0323", "\u212b", "\u2126",
          "x\u200by", "x\u200cy", "x\u200dy", "\ufeffBOM", "\ue000", "\U000f0000", "\u0000",
          "a\u0000b", "\u007f", "\u0085", "\u00ad", "Z\u0351\u0352\u0353", "\ufffd",
          "\u0301", "ｆｕｌｌｗｉｄｔｈ", "ＡＢＣ１２３", "\u00c5\u0041\u030a"]
    # Code.
    s += ["def f(x):\n    return x + 1\n",
          "func main() {\n\tfmt.Println(\"hi\")\n}\n",
          "for (int i = 0; i < n; ++i) { sum += a[i]; }",
          "if __name__ == '__main__':\n    main()",
          "SELECT * FROM users WHERE id = 42;",
          "<div class=\"x\">Hello</div>",
          "{\"key\": \"value\", \"n\": [1, 2, 3]}",
          "#include <stdio.h>\nint main(void) { return 0; }",
          "x := map[string]int{\"a\": 1}",
          "    indented four\n        indented eight\n",
          "a->b && c || !d",
          "// comment\n/* block */\n# hash",
          "$ ls -la | grep foo > out.txt 2>&1",
          "https://example.com/path?q=1&r=two#frag",
          "user@example.com",
          "C:\\Windows\\System32",
          "```python\nprint('hi')\n```",
          "lambda x: x**2",
          "===", "!==", "<<=", ">>>", "...", "!!!", "???", "@@", "##", "%%",
          "<|im_start|>", "<|im_end|>", "<|endoftext|>",
          "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
          "text<|im_end|>more", " <|im_start|> ", "<|im_start|><|im_end|>", "<|im_start",
          "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
          "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
          "<|begin_of_text|>Hello", "x<|eot_id|>y", "<|reserved_special_token_5|>",
          "<|python_tag|>", "<s>", "</s>", "<unk>", "[INST]", "<|fake_token|>",
          "<｜begin▁of▁sentence｜>", "<｜User｜>Hi<｜Assistant｜>", "x <｜end▁of▁sentence｜> y",
          "<｜fim▁hole｜>", "<|endofprompt|>", "CamelCaseWord HTTPServer iPhone", "don'T WON'T",
          "x/y/z\n", "a\r\n/b"]
    # Mixed.
    s += ["Price: €42.50 (≈ $45)", "Temp: -3°C", "50 km/h → 31 mph", "α + β = γ",
          "E = mc²", "H₂O", "x² + y² = z²", "½ ¼ ¾", "№ 5", "Œuvre", "ßẞ",
          "Mixed: 中文, English, 日本語, 한국어, Русский, العربية, 😀",
          "tab\there", "quote \"inside\" text", "back\\slash", "a'b\"c`d",
          "   \n\t  mixed whitespace \t\n  ", "word\n\n\n\nword", "end.\n"]
    # Repetition and long runs.
    s += ["a" * 50, "ab" * 40, " " * 33, "\n" * 17, "😀" * 10, "1" * 40, "-" * 64, "=" * 80,
          "na " * 16 + "Batman!", "の" * 20, "Ġ", "Ċ", "ĠĠ", "âĢĻ"]
    # Pseudo-random mixtures from a fixed generator.
    alphabet = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                "      \n\t.,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`"
                "éüßçñøåÆ中文字日本한국Ωπ😀👍🏽€£¥")
    g = lcg(20261129)
    for i in range(60):
        n = 1 + next(g) % 40
        s.append("".join(alphabet[next(g) % len(alphabet)] for _ in range(n)))
    # Long text.
    para = ("Disaggregated serving splits prefill and decode across engines. The prefill engine "
            "runs the prompt, samples one token and ships the KV cache; the decode engine then "
            "continues token by token. ")
    s.append(para * 6)
    s.append(("日本語の文章も長くしてみます。" * 12) + "\n" + ("Mixed 123 456 789 " * 10))
    s.append("\n".join("%d. item number %d with value %d" % (i, i, i * i) for i in range(30)))
    # Dedupe, keep order.
    seen, out = set(), []
    for x in s:
        if x not in seen:
            seen.add(x)
            out.append(x)
    if len(out) < 200:
        sys.exit("only %d strings" % len(out))
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print("wrote %d strings to %s" % (len(out), OUT))


if __name__ == "__main__":
    main()
