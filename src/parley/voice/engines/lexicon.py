"""Small recognition lexicons and grammars for the bundled US English acoustic model.

PocketSphinx ships one acoustic model (US English). With a grammar that only allows what a collect
node expects, that model also hears German: each German word is transcribed to the model's phone set
(the CMU/ARPAbet phones of its dictionary), with a few variants where eSpeak's German or a real
speaker differ. The same machinery gives English a small lexicon, so neither language needs the large
dictionary and language model for numbers and yes/no, and such a decoder loads in tens of
milliseconds instead of a quarter of a second.

Words are kept ASCII inside the decoder ("fuenf", "dreissig") and shown in German spelling in
transcripts ("fünf", "dreißig"). Compounds are spoken as their parts: "zweiundvierzig" is recognised
as "zwei und vierzig", which :mod:`parley.runtime.numbers` reads as 42.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

Grammar = Literal["number", "yes_no", "words"]

# --- German ---------------------------------------------------------------------------------------

_DE_UNITS = {
    # word: (stand-alone variants, combining stem variants used before "und"/"hundert"/"zehn")
    "eins": ["AY N S", "AY N Z", "AY N"],
    "ein": ["AY N", "AY N AH"],
    "zwei": ["T S V AY", "T S W AY", "S V AY"],
    "zwo": ["T S V OW", "T S W OW"],
    "drei": ["D R AY", "D AY", "T R AY"],
    "vier": ["F IY R", "F IY ER", "F IH R", "F IY AH"],
    "fuenf": ["F Y UW N F", "F IH N F", "F UW N F", "F ER N F", "F IY N F"],
    "sechs": ["Z EH K S", "S EH K S", "Z EH S"],
    "sieben": ["Z IY B AH N", "Z IY B N", "S IY B AH N", "Z IY B EH N"],
    "acht": ["AA K T", "AA HH T", "AH K T", "AA T"],
    "neun": ["N OY N", "N OY AH N"],
    "null": ["N UH L", "N UW L", "N AH L"],
}

_DE_OTHER = {
    "zehn": ["T S EY N", "T S EH N"],
    "elf": ["EH L F"],
    "zwoelf": ["T S V ER L F", "T S V EH L F", "T S V UH L F", "T S W ER L F"],
    "zwanzig": ["T S V AA N T S IH K", "T S V AA N T S IH SH", "T S W AA N T S IH K"],
    "dreissig": ["D R AY S IH K", "D R AY S IH SH", "D AY S IH K"],
    "hundert": ["HH UH N D ER T", "HH UW N D ER T", "HH UH N D AH T", "HH UH N D R AH T"],
    "tausend": ["T AW Z AH N T", "T AW Z EH N T", "T AW Z N T"],
    "und": ["UH N T", "UW N T", "AH N T", "UH N"],
    "ja": ["Y AA", "Y AH", "Y AA AH"],
    "nein": ["N AY N", "N AY"],
    "genau": ["G AH N AW", "G EH N AW"],
    "bitte": ["B IH T AH", "B IH T EH"],
    "danke": ["D AA NG K AH", "D AH NG K AH"],
    "gerne": ["G EH R N AH", "G EH N AH"],
    "richtig": ["R IH SH T IH K", "R IH K T IH K"],
    "nee": ["N EY"],
    "okay": ["OW K EY"],
}

# Stems of the teens and tens, e.g. "vier" + "zehn", "vier" + "zig".
_TEEN_STEMS = {
    "drei": ["D R AY"],
    "vier": ["F IY R", "F IH R"],
    "fuenf": ["F Y UW N F", "F IH N F", "F UW N F"],
    "sech": ["Z EH SH", "Z EH K", "Z EH"],
    "sieb": ["Z IY P", "Z IY B"],
    "acht": ["AA K", "AA HH"],
    "neun": ["N OY N"],
}
_TENS_STEMS = {
    "vier": _TEEN_STEMS["vier"],
    "fuenf": _TEEN_STEMS["fuenf"],
    "sech": _TEEN_STEMS["sech"],
    "sieb": _TEEN_STEMS["sieb"],
    "acht": _TEEN_STEMS["acht"],
    "neun": _TEEN_STEMS["neun"],
}
_ZEHN = ["T S EY N", "T S EH N"]
_ZIG = ["T S IH K", "T S IH SH"]


def _compose(stems: dict[str, list[str]], suffix: str, ends: list[str]) -> dict[str, list[str]]:
    words: dict[str, list[str]] = {}
    for stem, heads in stems.items():
        spelled = stem + suffix
        if stem == "acht":
            spelled = "acht" + suffix
        words[spelled] = [f"{head} {end}" for head in heads for end in ends]
    return words


GERMAN: dict[str, list[str]] = {
    **_DE_UNITS,
    **_DE_OTHER,
    **_compose(_TEEN_STEMS, "zehn", _ZEHN),
    **_compose(_TENS_STEMS, "zig", _ZIG),
}

# ASCII decoder word → German spelling in transcripts.
GERMAN_SPELLING = {
    "fuenf": "fünf",
    "fuenfzehn": "fünfzehn",
    "fuenfzig": "fünfzig",
    "zwoelf": "zwölf",
    "dreissig": "dreißig",
}
_ASCII = {spelled: word for word, spelled in GERMAN_SPELLING.items()}

# --- English (pronunciations as in the bundled CMU dictionary) --------------------------------------

ENGLISH: dict[str, list[str]] = {
    "zero": ["Z IH R OW", "Z IY R OW"],
    "oh": ["OW"],
    "one": ["W AH N"],
    "two": ["T UW"],
    "three": ["TH R IY"],
    "four": ["F AO R"],
    "five": ["F AY V"],
    "six": ["S IH K S"],
    "seven": ["S EH V AH N"],
    "eight": ["EY T"],
    "nine": ["N AY N"],
    "ten": ["T EH N"],
    "eleven": ["IH L EH V AH N", "IY L EH V AH N"],
    "twelve": ["T W EH L V"],
    "thirteen": ["TH ER T IY N"],
    "fourteen": ["F AO R T IY N"],
    "fifteen": ["F IH F T IY N"],
    "sixteen": ["S IH K S T IY N"],
    "seventeen": ["S EH V AH N T IY N"],
    "eighteen": ["EY T IY N"],
    "nineteen": ["N AY N T IY N"],
    "twenty": ["T W EH N T IY", "T W EH N IY"],
    "thirty": ["TH ER D IY", "TH ER T IY"],
    "forty": ["F AO R T IY"],
    "fifty": ["F IH F T IY"],
    "sixty": ["S IH K S T IY"],
    "seventy": ["S EH V AH N T IY", "S EH V AH N IY"],
    "eighty": ["EY T IY"],
    "ninety": ["N AY N T IY"],
    "hundred": ["HH AH N D R AH D", "HH AH N D R IH D", "HH AH N ER D"],
    "thousand": ["TH AW Z AH N D", "TH AW Z AH N"],
    "and": ["AH N D", "AE N D"],
    "double": ["D AH B AH L"],
    "yes": ["Y EH S"],
    "yeah": ["Y AE"],
    "yep": ["Y EH P"],
    "no": ["N OW"],
    "nope": ["N OW P"],
    "sure": ["SH UH R"],
    "correct": ["K ER EH K T"],
    "right": ["R AY T"],
    "okay": ["OW K EY"],
    "please": ["P L IY Z"],
    "thanks": ["TH AE NG K S"],
}

LEXICONS = {"de": GERMAN, "en": ENGLISH}

_NUMBER_WORDS = {
    "de": [
        w
        for w in GERMAN
        if w in _DE_UNITS
        or w.endswith(("zehn", "zig"))
        or w in ("elf", "zwoelf", "dreissig", "hundert", "tausend", "und")
    ],
    "en": [
        w
        for w in ENGLISH
        if w
        not in ("yes", "yeah", "yep", "no", "nope", "sure", "correct", "right", "okay", "please", "thanks")
    ],
}
_YES_NO_WORDS = {
    "de": ["ja", "nein", "genau", "bitte", "danke", "gerne", "richtig", "nee", "okay"],
    "en": ["yes", "yeah", "yep", "no", "nope", "sure", "correct", "right", "okay", "please", "thanks"],
}


def base_language(language: str | None) -> str:
    return (language or "en").strip().lower().replace("_", "-").split("-")[0]


def has_lexicon(language: str | None) -> bool:
    return base_language(language) in LEXICONS


def number_words(language: str | None) -> list[str]:
    """The words of the number grammar, in the language's spelling (hints for any recognizer)."""
    lang = base_language(language)
    words = _NUMBER_WORDS.get(lang, [])
    return [GERMAN_SPELLING.get(w, w) for w in words] if lang == "de" else list(words)


def yes_no_words(language: str | None) -> list[str]:
    return list(_YES_NO_WORDS.get(base_language(language), []))


def display(word: str) -> str:
    return GERMAN_SPELLING.get(word, word)


def decoder_word(word: str) -> str:
    """The lexicon's (ASCII) form of a word as a caller would spell it."""
    lowered = word.lower()
    return _ASCII.get(lowered, lowered)


def dictionary_text(language: str) -> str:
    """The lexicon as a PocketSphinx dictionary (``word(n) PHONES`` lines)."""
    lines = []
    for word, variants in LEXICONS[base_language(language)].items():
        for index, phones in enumerate(dict.fromkeys(variants)):
            lines.append(f"{word}{'' if index == 0 else f'({index + 1})'} {phones}")
    return "\n".join(lines) + "\n"


def classify(phrases: Sequence[str], language: str | None) -> Grammar:
    """Which grammar the phrases ask for: all number words, all yes/no words, or a word loop."""
    words = {decoder_word(w) for phrase in phrases for w in phrase.split()}
    lang = base_language(language)
    if words and words <= set(_NUMBER_WORDS.get(lang, ())):
        return "number"
    if words and words <= set(_YES_NO_WORDS.get(lang, ())):
        return "yes_no"
    return "words"


def _alts(words: Iterable[str]) -> str:
    return "( " + " | ".join(words) + " )"


def number_grammar(language: str | None) -> str:
    """JSGF for numbers said digit by digit or grouped, any number of them in a row."""
    if base_language(language) == "de":
        body = [
            f"<digit> = {_alts(['null', 'eins', 'zwei', 'zwo', 'drei', 'vier', 'fuenf', 'sechs', 'sieben', 'acht', 'neun'])};",
            f"<unit> = {_alts(['ein', 'zwei', 'drei', 'vier', 'fuenf', 'sechs', 'sieben', 'acht', 'neun'])};",
            f"<teen> = {_alts(['zehn', 'elf', 'zwoelf', *[w for w in GERMAN if w.endswith('zehn') and w != 'zehn']])};",
            f"<tens> = {_alts(['zwanzig', 'dreissig', *[w for w in GERMAN if w.endswith('zig') and w not in ('zwanzig',)]])};",
            "<below100> = <digit> | <teen> | <tens> | <unit> und <tens>;",
            "<below1000> = <below100> | [<unit>] hundert [[und] <below100>];",
            "<number> = <below1000> | [<below1000>] tausend [[und] <below1000>];",
        ]
    else:
        body = [
            f"<digit> = {_alts(['zero', 'oh', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine'])};",
            f"<teen> = {_alts(['ten', 'eleven', 'twelve', 'thirteen', 'fourteen', 'fifteen', 'sixteen', 'seventeen', 'eighteen', 'nineteen'])};",
            f"<tens> = {_alts(['twenty', 'thirty', 'forty', 'fifty', 'sixty', 'seventy', 'eighty', 'ninety'])};",
            "<below100> = [double] <digit> | <teen> | <tens> [<digit>];",
            "<below1000> = <below100> | <digit> hundred [[and] <below100>];",
            "<number> = <below1000> | [<below1000>] thousand [[and] <below1000>];",
        ]
    return "#JSGF V1.0;\ngrammar hints;\n" + "\n".join(body) + "\npublic <utt> = <number>+ ;\n"


def yes_no_grammar(language: str | None) -> str:
    words = _YES_NO_WORDS[base_language(language)]
    return "#JSGF V1.0;\ngrammar hints;\npublic <utt> = " + _alts(words) + "+ ;\n"


def loop_grammar(words: Sequence[str]) -> str:
    return "#JSGF V1.0;\ngrammar hints;\npublic <utt> = " + _alts(words) + "+ ;\n"


def grammar_for(phrases: Sequence[str] | None, language: str | None) -> str:
    """The JSGF for a lexicon language: the node's expected answer, or everything the lexicon knows."""
    lang = base_language(language)
    lexicon = LEXICONS[lang]
    if phrases:
        kind = classify(phrases, lang)
        if kind == "number":
            return number_grammar(lang)
        if kind == "yes_no":
            return yes_no_grammar(lang)
        words = [
            w for w in dict.fromkeys(decoder_word(w) for p in phrases for w in p.split()) if w in lexicon
        ]
        if words:
            return loop_grammar(words)
    return loop_grammar(list(lexicon))
