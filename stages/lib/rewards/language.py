"""Language consistency (DeepSeek-R1, reasoning RL): the share of the chain of thought's words that
are in the target language. Detected by script, so English/Chinese mixing is scored without a
language-identification model: a Latin-script word counts for `en`, each Han character or kana
for `zh`/`ja`, a Hangul run for `ko`, a Cyrillic word for `ru`. Digits and symbols are neutral."""

import re

from stages.lib.templates import reasoning_of

SCRIPTS = {
    "latin": r"[A-Za-z\u00c0-\u024f]+",
    "han": r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]",  # one character, one word
    "kana": r"[\u3040-\u30ff]",
    "hangul": r"[\uac00-\ud7af\u1100-\u11ff]+",
    "cyrillic": r"[\u0400-\u04ff]+",
}
WORD = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in SCRIPTS.items()))
LANGUAGE_SCRIPTS = {"en": {"latin"}, "zh": {"han"}, "ja": {"han", "kana"}, "ko": {"hangul"}, "ru": {"cyrillic"}}

def target_language_share(text: str, language: str = "en") -> float:
    """Share of words in `language`'s scripts; 1.0 for text without words (nothing to mix)."""
    if language not in LANGUAGE_SCRIPTS:
        raise ValueError(f"unsupported target language {language!r}: one of {sorted(LANGUAGE_SCRIPTS)}")
    wanted = LANGUAGE_SCRIPTS[language]
    total = in_language = 0
    for match in WORD.finditer(text):
        total += 1
        in_language += match.lastgroup in wanted
    return in_language / total if total else 1.0


def language_consistency(completion: str, language: str = "en") -> float:
    return target_language_share(reasoning_of(completion), language)
