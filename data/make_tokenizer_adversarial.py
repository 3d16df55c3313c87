#!/usr/bin/env python3
"""Writes data/tokenizer_adversarial.txt, the hard cases for BPE encoding
that tests/tokenizer checks against tokenizers and tiktoken: the
pre-tokenisation pattern's corner cases (contractions in odd cases and
places, digit runs, punctuation runs, white space runs before letters and at
the end, tabs, CR, LF and CRLF mixed, Unicode spaces and look-alikes),
numbers and letters of many scripts, combining marks, emoji sequences,
control characters, special tokens in odd places, very long runs.

    python3 data/make_tokenizer_adversarial.py > data/tokenizer_adversarial.txt
"""
import sys

PARTS = [
    "Contractions: don't DON'T I'm I'M we're we'Re you've YOU'VE he'll HE'LL she'd SHE'D it's IT'S\n",
    "Odd ones: ''s 's's 's ' s 'S 'Ll 'lL y'all'll've ''' '''s rock'n'roll o'clock 'tis '\n",
    "'s at the start, 'd'd'd, x's, 9's, ?'s, \u2019s (a curly apostrophe) and \u02bcs.\n",
    "Digits: 0 12 345 6789 0123456789012345678901234567890 3.14159 1,000,000 1e-9 -42 +7\n",
    "Other numbers: \u0663\u0664\u0665 (Arabic-Indic) \u096a\u096b (Devanagari) \u2167 \u216b (Roman) \u00bd \u00b2 \u2460 \u4e00\u4e8c\u4e09 x2y3 a1b2c3\n",
    "Latin: na\u00efve caf\u00e9 \u00c5ngstr\u00f6m stra\u00dfe \u0141\u00f3d\u017a \u0131stanbul \u01c5 \u1e9e\n",
    "Combining marks: e\u0301 a\u0308\u0304 n\u0303 o\u0328\u0301 Z\u0351\u0354\u0327a\u0350\u0318l\u0357\u0325g\u0352o\u0315 \u0301alone \u20dd\n",
    "Greek: \u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5. Cyrillic: \u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0401\u0436\u0438\u043a\n",
    "Arabic: \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u064b\u0651 Hebrew: \u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd \u05e2\u05d5\u05dc\u05dd\n",
    "Devanagari: \u0939\u093f\u0928\u094d\u0926\u0940 \u0928\u092e\u0938\u094d\u0924\u0947 Tamil: \u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd Thai: \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a\n",
    "CJK: \u4f60\u597d\uff0c\u4e16\u754c\u3002\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u30ab\u30bf\u30ab\u30ca\u30fc \ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8 \U00020000\U0002a6d6\n",
    "Emoji: \U0001f600\U0001f602 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 \U0001f1eb\U0001f1f7\U0001f1ef\U0001f1f5 \u2764\ufe0f \u263a\ufe0e 1\ufe0f\u20e3 \U0001f3f3\ufe0f\u200d\U0001f308\n",
    "Symbols: \u00a9\u00ae\u2122 \u20ac$\u00a3\u00a5 \u2200x\u2208\u211d \u2192\u21d2 \u00ab\u00bb \u201cquotes\u201d \u2014dash\u2013 \u2026 \u00b7 \U0001d400\U0001d54f \U0001d7d8\n",
    "Punctuation runs: !!!???... ,,, ;;; ::: --- ___ *** ((( ))) [[ ]] {{ }} <<>> @@## $$%% ^^&& ~~``\n",
    "Whitespace:   three spaces,\ttab,\t\ttwo tabs, \t mixed \t , trailing   \n",
    "CRLF line\r\nCR only\rLF only\nCR CR\r\r, LF LF\n\n, CRLF CRLF\r\n\r\n",
    "   leading spaces\n\t\tleading tabs\n \n  \n   \n\n\n\n",
    "Unicode spaces: a\u00a0b c\u3000d e\u2009f g\u200ah i\u202fj k\u205fl m\u1680n o\u2028p q\u2029r s\u0085t u\u000bv w\u000cx\n",
    "Not spaces: zero\u200bwidth joiner\u200dhere soft\u00adhyphen bom\ufeffmark \u2060wj\n",
    "Spaces before things:  word  123  !!!  \u00e9t\u00e9  \U0001f600  \u4e2d  \u0301  'll  's\n",
    "Controls: \x00nul \x01\x02\x03 bell\x07 esc\x1b[0m del\x7f \x1c\x1d\x1e\x1f sep\n",
    "Special tokens: <|endoftext|> in the middle, twice<|endoftext|><|endoftext|>, a partial <|endoftext and |endoftext|>, <|endoftext|>at start and end<|endoftext|>\n",
    "<|endoftext|>\n  <|endoftext|>  \n",
    "Mixed: abc123def 123abc abc_def a-b-c a.b.c \u00e9123 \u0661\u0662a foo\u00e9bar 100% $5.00 #tag @user http://x.y/z?a=1&b=2\n",
    "Long run: " + "a" * 300 + " " + "7" * 300 + " " + "!" * 300 + " " * 300 + "end\n",
    "Case: HELLO hello HeLLo \u00c9COLE \u00e9cole \u01c4\u01c5\u01c6 \u1f88 \u0130i\u0307\n",
    "The end without a newline, then spaces   ",
]

sys.stdout.buffer.write("".join(PARTS).encode("utf-8"))
