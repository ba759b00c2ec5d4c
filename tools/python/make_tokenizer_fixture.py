"""Make the BPE tokenizer fixture that tests/tests/tokenizer.rs checks ferrite against.

Trains a small byte-level BPE (GPT-2 style: ByteLevel pre-tokenizer with the
GPT-2 regex, ByteLevel decoder, one special token) with the HuggingFace
`tokenizers` library on English text, and writes

- tests/tokenizer/tokenizer.json  the tokenizer (HF format), and
- tests/tokenizer/expected.json   the library's ids for every sample text.

CI has no `tokenizers`; it checks the committed files. Regenerate (from the
repository root) where the library is installed:

    apt-get install -y fortunes fortunes-min     # the training text
    pip install tokenizers                       # made with 0.23.3
    python3 tools/python/make_tokenizer_fixture.py [CORPUS_FILE ...]

Special tokens are encoded as plain text (`encode_special_tokens = True`),
which is what ferrite's encoder does: it never matches added tokens in text.
"""

import glob
import json
import os
import sys

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "tokenizer")
VOCAB = 800
MAX_PIECE = 64  # ferrite's BPE_MAX_PIECE: samples stay below it

SAMPLES = [
    "Hello, world!",
    "Once upon a time there was a little robot.",
    "It's a dog's life; they're sure we've said I'm fine, we'll see, he'd go.",
    "Don't SHOUT: I'M here, YOU'RE there. 'quoted' and \"double\".",
    "The year 2024 had 366 days; pi is 3.14159 and 1,000,000 > 999.",
    "a  b   c    d",
    "trailing spaces   ",
    "   leading spaces",
    "line one\nline two\n\nline four\r\n",
    "tabs\tand\t\tmore\ttabs",
    " \n \t x",
    "café, naïve, résumé, Ångström, Straße, ÉCOLE",
    "日本語のテキストと中文文本",
    "emoji 🙂🚀 and 👩‍💻 and flags 🇫🇷",
    "Ελληνικά και русский текст",
    "Arabic digits ١٢٣ and roman Ⅻ and ½ fractions",
    "non-breaking\u00a0space and ideographic\u3000space",
    "email: someone@example.com, url: https://example.com/a?b=c&d=e",
    "fn main() { println!(\"{}\", 1 + 2); } // code",
    "ALL CAPS and MiXeD cAsE and snake_case and kebab-case",
    "Q: What's 6*7? A: 42!!! (obviously...)",
    "<|endoftext|> is a special token, here as text",
    "",
    " ",
    "x",
    "'s 't 're 've 'm 'll 'd",
    "What do you get if you multiply six by nine?\n\t-- Douglas Adams",
]


def corpus_files(args):
    if args:
        return args
    files = sorted(
        f
        for f in glob.glob("/usr/share/games/fortunes/*")
        if os.path.isfile(f) and not f.endswith((".dat", ".u8"))
    )
    if not files:
        sys.exit("no training text: apt-get install fortunes fortunes-min, or pass files")
    return files


def main():
    files = corpus_files(sys.argv[1:])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        min_frequency=2,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(files, trainer)
    tok.encode_special_tokens = True
    os.makedirs(OUT, exist_ok=True)
    tok.save(os.path.join(OUT, "tokenizer.json"), pretty=False)

    samples = []
    for text in SAMPLES:
        pieces = tok.pre_tokenizer.pre_tokenize_str(text)
        # One byte-level character per raw byte.
        longest = max((len(p) for p, _ in pieces), default=0)
        assert longest <= MAX_PIECE, text
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == text, text
        samples.append({"text": text, "ids": ids})
    expected = {
        "tokenizers_version": tokenizers.__version__,
        "training_files": [os.path.basename(f) for f in files],
        "vocab_size": tok.get_vocab_size(),
        "samples": samples,
    }
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"vocab {tok.get_vocab_size()}, {len(samples)} samples -> {OUT}")


if __name__ == "__main__":
    main()
