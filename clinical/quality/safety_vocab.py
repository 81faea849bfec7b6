"""Word lists of the safety check (:mod:`clinical.quality.safety`): units with
their spelled forms, laterality and negation cues, in English and Spanish.

All output-side forms are written lower-case and without accents: the
output is normalised the same way before matching.
"""

from __future__ import annotations

#: Unit key → (kind, input abbreviations/words (regex, case-insensitive),
#: output forms). ``dose`` units measure an amount of a drug; the rest are
#: ``measurement`` units.
UNITS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "mg": ("dose", r"mg|milligrams?", ("mg", "milligram", "milligrams", "milligramme", "miligramo", "miligramos")),
    "mcg": ("dose", r"mcg|µg|μg|ug|micrograms?",
            ("mcg", "µg", "μg", "ug", "microgram", "micrograms", "microgramo", "microgramos")),
    "g": ("dose", r"g|grams?|gm", ("g", "gm", "gram", "grams", "gramo", "gramos")),
    "ml": ("dose", r"ml|cc|milliliters?|millilitres?",
           ("ml", "cc", "milliliter", "milliliters", "millilitre", "millilitres", "mililitro", "mililitros",
            "cubic centimeter", "cubic centimeters")),
    "l": ("dose", r"l|liters?|litres?", ("l", "liter", "liters", "litre", "litres", "litro", "litros")),
    "units": ("dose", r"units?|iu|u", ("unit", "units", "iu", "u", "international units", "unidad", "unidades",
                                        "unidades internacionales")),
    # Million units (interferon "3 MU thrice weekly"); before "units" is read, so "MU" is not a bare "U".
    "mu": ("dose", r"mu|miu|million\s+(?:international\s+)?units?|mega\s?units?",
           ("mu", "miu", "million units", "million international units", "megaunits", "mega units",
            "millones de unidades")),
    # Radiation doses (Gy, cGy, mGy): three units a hundred or a thousand times apart.
    "gy": ("dose", r"gy|grays?", ("gy", "gray", "grays")),
    "cgy": ("dose", r"cgy|centigrays?", ("cgy", "centigray", "centigrays")),
    "mgy": ("dose", r"mgy|milligrays?", ("mgy", "milligray", "milligrays")),
    "meq": ("dose", r"meq|milliequivalents?", ("meq", "milliequivalent", "milliequivalents",
                                                "miliequivalente", "miliequivalentes")),
    "mmol": ("measurement", r"mmol|millimoles?", ("mmol", "millimole", "millimoles", "milimol", "milimoles")),
    "tablet": ("dose", r"tablets?|tabs?|pills?", ("tablet", "tablets", "tab", "tabs", "pill", "pills", "tableta",
                                                  "tabletas", "pastilla", "pastillas", "comprimido", "comprimidos")),
    "capsule": ("dose", r"capsules?|caps?", ("capsule", "capsules", "cap", "caps", "capsula", "capsulas")),
    "puff": ("dose", r"puffs?", ("puff", "puffs", "inhalacion", "inhalaciones", "disparo", "disparos")),
    "drop": ("dose", r"drops?|gtts?", ("drop", "drops", "gtt", "gtts", "gota", "gotas")),
    "percent": ("measurement", r"%|percent|per\s+cent", ("%", "percent", "per cent", "por ciento")),
    "mmhg": ("measurement", r"mm\s?hg", ("mmhg", "mm hg", "millimeters of mercury", "millimetres of mercury",
                                         "milimetros de mercurio")),
    "mm": ("measurement", r"mm|millimeters?|millimetres?",
           ("mm", "millimeter", "millimeters", "millimetre", "millimetres", "milimetro", "milimetros")),
    "cm": ("measurement", r"cm|centimeters?|centimetres?",
           ("cm", "centimeter", "centimeters", "centimetre", "centimetres", "centimetro", "centimetros")),
    # Imperial lengths and weights (US notes): 5'2" is five feet two inches.
    "inch": ("measurement", r"inch(?:es)?|''|\"", ("inch", "inches", "''", '"', "pulgada", "pulgadas")),
    "foot": ("measurement", r"feet|foot|ft|'(?!')", ("foot", "feet", "ft", "'", "pie", "pies")),
    "ounce": ("measurement", r"ounces?|oz", ("ounce", "ounces", "oz", "onza", "onzas")),
    "kg": ("measurement", r"kg|kilograms?|kilos?", ("kg", "kilogram", "kilograms", "kilo", "kilos",
                                                   "kilogramo", "kilogramos")),
    "lb": ("measurement", r"lbs?|pounds?", ("lb", "lbs", "pound", "pounds", "libra", "libras")),
    "bpm": ("measurement", r"bpm|beats\s+per\s+minute", ("bpm", "beats per minute", "beats a minute", "beats",
                                                          "times a minute", "times per minute", "per minute",
                                                          "a minute", "latidos", "por minuto")),
    "degree": ("measurement", r"°\s?[fc]?|degrees?(?:\s+(?:fahrenheit|celsius))?",
               ("°c", "°f", "° c", "° f", "°", "degree", "degrees", "grado", "grados")),
    "year": ("measurement", r"years?(?:[\s-]old)?|y/?o|yrs?", ("year", "years", "yr", "yrs", "y/o", "yo",
                                                              "ano", "anos")),
    "month": ("measurement", r"months?|mos?", ("month", "months", "mo", "mos", "mes", "meses")),
    "week": ("measurement", r"weeks?|wks?", ("week", "weeks", "wk", "wks", "semana", "semanas")),
    "day": ("measurement", r"days?", ("day", "days", "dia", "dias")),
    "hour": ("measurement", r"hours?|hrs?|h", ("hour", "hours", "hr", "hrs", "h", "hora", "horas")),
    "minute": ("measurement", r"minutes?|mins?", ("minute", "minutes", "min", "mins", "minuto", "minutos")),
    "second": ("measurement", r"seconds?|secs?", ("second", "seconds", "sec", "secs", "segundo", "segundos")),
}

#: Denominators of compound units (``mg/dL``, ``mg/kg``, ``mL/h``) → output forms.
PER_UNITS: dict[str, tuple[str, tuple[str, ...]]] = {
    "dl": (r"dl|deciliters?|decilitres?", ("dl", "deciliter", "decilitre", "decilitro")),
    "l": (r"l|liters?|litres?", ("l", "liter", "litre", "litro")),
    "kg": (r"kg|kilograms?", ("kg", "kilogram", "kilo", "kilogramo", "body weight", "peso")),
    "day": (r"days?|d", ("day", "d", "daily", "dia", "diario", "diaria")),
    "hour": (r"hours?|hrs?|h", ("hour", "hr", "h", "hourly", "hora")),
    "min": (r"minutes?|min", ("minute", "min", "minuto")),
    "m2": (r"m2|m²", ("m2", "m²", "square meter", "square metre", "metro cuadrado")),
}

#: Input laterality word (regex) → side.
LATERALITY_INPUT = (
    (r"\bbilateral(?:ly)?\b", "bilateral"),
    (r"\bleft\b", "left"),
    (r"\bright\b(?!\s+(?:away|now))(?<!\ball right)", "right"),
)
#: Side → output words (regex over the normalised output).
LATERALITY_OUTPUT = {
    "left": r"\bleft\b|\bizquierd[oa]s?\b",
    "right": r"\bright\b|\bderech[oa]s?\b",
    "bilateral": r"\bbilateral(?:ly)?\b|\bboth\b|\beach side\b|\bleft and right\b|\bright and left\b"
                 r"|\bamb[oa]s\b|\blos dos lados\b|\bizquierd[oa]s? y derech[oa]s?\b",
}

#: NegEx-style cues in the input (Chapman et al. 2001, the subset named in
#: the issue, plus their inflections). ``n't`` counts as "not".
NEGATION_INPUT = r"\b(?:no|not|without|denies|denied|deny|negative\s+for)\b|n't\b"
#: NegEx pseudo-negations: cue phrases that do not negate a finding.
PSEUDO_NEGATION = r"\b(?:no\s+(?:increase|change|further|significant\s+change)|not\s+only|not\s+necessarily)\b"
#: Negation words accepted in the output (English and Spanish).
NEGATION_OUTPUT = (r"\b(?:no|not|without|denies|denied|deny|negative|none|never|nothing|neither|nor|"
                   r"sin|niega|nego|negativ[oa]s?|ningun[oa]?|nunca|nada|ni|tampoco)\b|n't\b")
#: Uncertainty (speculation) cues in the input: the diagnostic hedges of ConText's
#: "probable existence" and "indication" modifiers (Harkema et al. 2009, "ConText: an
#: algorithm for determining negation, experiencer, and temporal status from clinical
#: reports") and the BioScope corpus's speculation cues (Vincze et al. 2008), without
#: the modal verbs may/might/could, which in a note often grant or describe ("may
#: return to work"), and without "versus" ("risks versus benefits").
UNCERTAINTY_INPUT = (r"\b(?:possible|possibly|probable|probably|likely|unlikely|suspicious|suspected|suspect|"
                     r"suspicion|questionable|question\s+of|cannot\s+be\s+(?:excluded|ruled\s+out)|"
                     r"can\s+not\s+be\s+(?:excluded|ruled\s+out)|not\s+(?:be\s+)?excluded|rule\s+out|r/o|"
                     r"concern\s+for|concerning\s+for|worrisome\s+for|suggestive\s+of|suggests|suggesting|"
                     r"equivocal|indeterminate|non\s?specific|doubtful|uncertain|unclear|presumed|presumably|"
                     r"presumptive|differential)\b")
#: Words of doubt accepted in the output (English and Spanish, accents removed): the
#: cues themselves and their lay forms ("maybe", "might", "not sure", "check for").
UNCERTAINTY_OUTPUT = (r"\b(?:possible|possibly|probable|probably|likely|unlikely|maybe|perhaps|may|might|could|"
                      r"suspicious|suspected|suspect|suspicion|question|questionable|unsure|uncertain|unclear|"
                      r"doubt\w*|seems?|seemed|appears?|appeared|looks?\s+like|concern\w*|worr\w*|rule\s+out|"
                      r"ruled\s+out|(?:check|checked|checking|test|tested|testing|look|looked|looking)\s+(?:for|if|"
                      r"whether|to\s+see)|whether|if|specific|nonspecific|unspecific|suggest\w*|signs?\s+of|think|"
                      r"thought|believe\w*|presum\w*|chance|equivocal|indeterminate|excluded|posible\w*|"
                      r"probable\w*|quizas?|tal\s+vez|puede\w*|podria\w*|sospech\w*|parece\w*|descartar|duda\w*|"
                      r"especific\w*)\b"
                      r"|(?:\bnot|n't|\bno)\s+(?:[a-z]+\s+)?(?:sure|certain|clear|seguro|segura|claro)\b")
#: A qualifier of extent in the input: the finding or the act holds in part
#: ("partially resolved", "partial tear", "incomplete emptying", "not
#: completely performed", "not fully healed", "not all"). Dropped, the text
#: says it holds in full, or (under a negation) not at all. NegEx-style
#: cue words; the degree modifiers of ConText are about certainty, not extent.
EXTENT_INPUT = (r"\b(?:partial|partially|partly|incomplete|incompletely|in\s+part|"
                r"not\s+(?:yet\s+)?(?:complete|completely|fully|full|entirely|totally|all|always))\b")
#: Words of part in the output (English and Spanish, accents removed): the
#: cues themselves and their lay forms ("part of", "some", "only", "still",
#: "not all the way"), lenient on purpose, as the uncertainty kind is.
EXTENT_OUTPUT = (r"\b(?:partial\w*|partly|incomplete\w*|part|parts|partway|halfway|half|some|somewhat|only|"
                 r"still|mostly|almost|nearly|bit|little|not\s+(?:\w+\s+)?(?:yet|complete\w*|full\w*|"
                 r"entire\w*|total\w*|all|always|whole|finished|done)|parcial\w*|incomplet\w*|"
                 r"parte|algun\w*|solo|todavia|aun|casi)\b")
#: Words that end a negation's scope (NegEx terminators) besides punctuation.
SCOPE_TERMINATORS = {"but", "however", "although", "though", "except", "which", "who"}
#: Words in a negation's scope that do not identify it.
SCOPE_STOPWORDS = {"the", "a", "an", "any", "of", "for", "to", "in", "on", "at", "with", "is", "are", "was",
                   "were", "be", "been", "has", "have", "had", "evidence", "signs", "sign", "acute", "other",
                   "significant", "obvious", "known", "history", "there", "this", "that", "your", "you"}
#: Scope length cap in words (NegEx uses a five-word window).
SCOPE_WORDS = 5

#: Spanish month names, January to December (a date's month may be written
#: by name in a Spanish translation; English names come from ``calendar``).
MONTHS_ES = ("enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre", "octubre",
             "noviembre", "diciembre")
