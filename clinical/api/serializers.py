"""Request and response shapes of the REST API (also its OpenAPI schema)."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from clinical.quality.faithfulness import KINDS as FAITHFULNESS_KINDS
from clinical.quality.safety import KINDS as SAFETY_KINDS
from inference.prompts import DEFAULT_LANGUAGE, DEFAULT_READING_LEVEL, LANGUAGES, READING_LEVELS


class StrictCharField(serializers.CharField):
    """A JSON string only: DRF's CharField would turn ``5`` or ``true`` into
    text."""

    default_error_messages = {"not_a_string": "Must be a JSON string."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class TranslationRequestSerializer(serializers.Serializer):
    text = StrictCharField(
        allow_blank=False, trim_whitespace=True, max_length=settings.MAX_INPUT_CHARS,
        help_text=f"The diagnosis text as a clinician wrote it (at most {settings.MAX_INPUT_CHARS:,} characters).")
    reading_level = serializers.ChoiceField(
        choices=sorted(READING_LEVELS), default=DEFAULT_READING_LEVEL, required=False,
        help_text="US school grade the explanation is written for.")
    language = serializers.ChoiceField(choices=sorted(LANGUAGES), default=DEFAULT_LANGUAGE, required=False,
                                       help_text="Language of the explanation (ISO 639-1).")


class TimingsSerializer(serializers.Serializer):
    queue_wait_ms = serializers.FloatField(allow_null=True, help_text="received → engine admitted")
    ttft_ms = serializers.FloatField(allow_null=True, help_text="received → first token")
    total_ms = serializers.FloatField(allow_null=True, help_text="received → last token")
    rerun_queue_wait_ms = serializers.FloatField(allow_null=True, help_text="re-run enqueued → started")
    rerun_ms = serializers.FloatField(allow_null=True, help_text="full-precision re-run duration")


class ReadabilitySerializer(serializers.Serializer):
    input_fkgl = serializers.FloatField(allow_null=True, help_text="Flesch-Kincaid grade level of the input.")
    output_fkgl = serializers.FloatField(allow_null=True,
                                         help_text="Flesch-Kincaid grade level of the output (English only).")
    measure = serializers.ChoiceField(choices=["fkgl", "szigriszt_pazos", ""],
                                      help_text="The output's measure: FKGL (English), Szigriszt-Pazos "
                                                "perspicuity (Spanish, 0-100, higher is easier) or none.")
    score = serializers.FloatField(allow_null=True, help_text="The output's value on `measure`.")
    note = serializers.CharField(allow_blank=True, help_text="How to read the score, or why there is none.")


class SafetyItemSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=list(SAFETY_KINDS))
    text = serializers.CharField(help_text="The item as written in the input.")


class SafetySerializer(serializers.Serializer):
    passed = serializers.BooleanField(allow_null=True, help_text="Every number with its unit, dose, drug, "
                                      "side, negation, hedge and qualifier of extent (partial, not "
                                      "completely) of the input is in the output, and (English output) "
                                      "each medical term is kept or explained (null until completed).")
    missing = SafetyItemSerializer(many=True)


class FaithfulnessFlagSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=list(FAITHFULNESS_KINDS))
    text = serializers.CharField(help_text="The statement as written in the output.")
    detail = serializers.CharField(allow_blank=True, help_text='Why, e.g. "not in input", "flipped".')


class FaithfulnessSerializer(serializers.Serializer):
    passed = serializers.BooleanField(allow_null=True, help_text="The output states no number, unit, drug, "
                                      "side, body site, vital sign, organ failure, direction (up/down), "
                                      "negation or person the "
                                      "input does not (null until completed).")
    flags = FaithfulnessFlagSerializer(many=True)


class SelfCheckSerializer(serializers.Serializer):
    p_yes = serializers.FloatField(help_text="The model's own check: the probability it gives \"Yes\" to "
                                   "\"does the rewrite say the same thing as the diagnosis?\" (0-1).")
    version = serializers.CharField(help_text="Version of the self-check question.")
    threshold = serializers.FloatField(allow_null=True, help_text="The P(yes) below which the gate re-runs "
                                       "a text (0-1; null where the confidence gated it).")
    passed = serializers.BooleanField(allow_null=True, help_text="`p_yes` is at or above `threshold`; false: "
                                      "the model doubts this text, read it against the diagnosis before "
                                      "giving it to a patient (null without a threshold).")


class GlossaryTermSerializer(serializers.Serializer):
    term = serializers.CharField(help_text="The term as written in the input.")
    definition = serializers.CharField(help_text="From the vocabulary named in `source_name`; for a drug name "
                                                 "the vocabularies have no plain definition of: `A medicine "
                                                 "(no vetted plain definition).`")
    source = serializers.CharField(help_text="The vocabulary: `hpo_layperson` (Human Phenotype Ontology lay "
                                             "synonym), `hpo` (its clinical definition), `drug` (drug "
                                             "dictionary); `engine`, which stored rows may hold, marks a "
                                             "definition a language model wrote.")
    source_name = serializers.CharField(help_text="The vocabulary's name for the reader, with its release "
                                                  "where known, e.g. `Human Phenotype Ontology (lay synonym), "
                                                  "release 2025-01-16`.")


class SpanSerializer(serializers.Serializer):
    text = serializers.CharField(allow_blank=True)
    start = serializers.IntegerField(help_text="Character offset where it starts (from 0).")
    end = serializers.IntegerField(help_text="Character offset just after it ends.")


class SentenceFlagSerializer(FaithfulnessFlagSerializer):
    start = serializers.IntegerField(help_text="Character offset of the flagged words in `text`.")
    end = serializers.IntegerField(help_text="Character offset just after them in `text`.")


class SentenceMissingSerializer(SafetyItemSerializer):
    start = serializers.IntegerField(allow_null=True, help_text="Character offset of the lost words in the "
                                     "diagnosis as submitted; null where it does not hold them word for word.")
    end = serializers.IntegerField(allow_null=True)


class SentenceTermSerializer(serializers.Serializer):
    term = serializers.CharField(help_text="A medical term of the glossary, as the glossary names it.")
    start = serializers.IntegerField(help_text="Character offset where the plain sentence keeps it, in `text` "
                                     "(in a Spanish text, where it names it by HPO's Spanish label).")
    end = serializers.IntegerField()
    definition = serializers.CharField(help_text="Its definition from a vetted vocabulary, or a statement that "
                                       "the vocabularies have none.")
    source = serializers.CharField()
    source_name = serializers.CharField(help_text="The vocabulary and its release.")


class SentenceSerializer(serializers.Serializer):
    number = serializers.IntegerField(help_text="From 1.")
    source = SpanSerializer(help_text="The sentence of the diagnosis, offsets into the text submitted.")
    plain = SpanSerializer(allow_null=True, help_text="Its plain sentence, offsets into `text`; null where the "
                           "model gave nothing for it.")
    status = serializers.ChoiceField(
        choices=["rewritten", "as_written", "rerun", "doubted"],
        help_text="`rewritten`: the model's plain words; `as_written`: the diagnosis as written (explain it "
                  "yourself where `why` says so); `rerun`: replaced by the verified full-precision re-run; "
                  "`doubted`: the model's own check doubts it and it is not verified: read it against "
                  "`source` before giving it to a patient.")
    why = serializers.CharField(allow_blank=True, help_text="The status's reason in words.")
    reasons = serializers.ListField(child=serializers.CharField(), help_text="The `rerun_reason` codes that "
                                    "re-ran or doubt this sentence.")
    p_yes = serializers.FloatField(allow_null=True, help_text="The model's own check of this sentence (0-1).")
    flags = SentenceFlagSerializer(many=True, help_text="Faithfulness flags in this plain sentence.")
    missing = SentenceMissingSerializer(many=True, help_text="What the safety check found lost from this "
                                        "source sentence.")
    terms = SentenceTermSerializer(many=True, help_text="Medical terms this plain sentence keeps, each with its "
                                   "vetted explanation.")


class VerifiedQualitySerializer(serializers.Serializer):
    readability = ReadabilitySerializer()
    safety = SafetySerializer()
    faithfulness = FaithfulnessSerializer()
    self_check = SelfCheckSerializer(allow_null=True)


class TranslationSerializer(serializers.Serializer):
    id = serializers.UUIDField(help_text="Request id; use it to poll GET /api/v1/translations/{id}/.")
    status = serializers.ChoiceField(choices=["pending", "completed", "cancelled", "error"])
    text = serializers.CharField(allow_blank=True, help_text="What the patient should read: the verified "
                                 "text once verified, else the fast text.")
    fast_text = serializers.CharField(allow_blank=True)
    verified_text = serializers.CharField(allow_null=True)
    verified = serializers.BooleanField(help_text="True once the full-precision re-run replaced the fast text.")
    verification = serializers.ChoiceField(choices=["not_needed", "pending", "running", "verified", "failed"])
    confidence = serializers.FloatField(allow_null=True, help_text="Geometric-mean token probability, (0, 1].")
    verified_confidence = serializers.FloatField(allow_null=True)
    engine = serializers.CharField()
    model = serializers.CharField()
    precision = serializers.CharField(
        help_text="Precision of the text in `text`, as its engine reported it after load: the fast "
                  "engine's (e.g. `q4_k_m`, `fp8`), or once verified the re-run engine's (e.g. `fp32`, "
                  "`bf16`, `fp8 (compressed-tensors)`; `fp32` for re-runs recorded before engines "
                  "reported one).")
    prompt_version = serializers.CharField()
    reading_level = serializers.IntegerField()
    language = serializers.CharField()
    tokens_in = serializers.IntegerField(allow_null=True)
    tokens_out = serializers.IntegerField(allow_null=True)
    timings = TimingsSerializer()
    ai_generated = serializers.BooleanField(help_text="Always true: check before giving it to a patient.")
    readability = ReadabilitySerializer(help_text="Readability of the input and of the fast output.")
    safety = SafetySerializer(help_text="Safety check of the fast output: what it lost.")
    faithfulness = FaithfulnessSerializer(help_text="Faithfulness check of the fast output: what it states "
                                          "that the input does not.")
    self_check = SelfCheckSerializer(allow_null=True, help_text="The model's own check of the fast output "
                                     "(null when it did not run: the gate then reads the confidence).")
    rerun_reason = serializers.CharField(allow_blank=True, help_text="Why the full-precision re-run was "
                                         "queued: `low_self_check` (or `low_confidence` where the self-check "
                                         "did not run), `safety_failed`, `faithfulness_failed`, comma-separated.")
    glossary = GlossaryTermSerializer(many=True, help_text="Medical terms of the input with short definitions "
                                      "from vetted vocabularies, each naming its source.")
    sentences = SentenceSerializer(
        many=True, help_text="Each sentence of the diagnosis beside its plain sentence in `text`, with its status "
                             "and the checks' findings located by character offset (the whole text as one pair "
                             "where the text was not written sentence by sentence); empty until completed.")
    verified_quality = VerifiedQualitySerializer(allow_null=True,
                                                 help_text="The re-run output's own readability, safety and "
                                                           "faithfulness checks.")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
    code = serializers.CharField(required=False, help_text="The refusal's code where it has one: `busy`, "
                                 "`engine_restarting`, `engine_error`, `unavailable`, `draining`, "
                                 "`too_many_translations`, `empty`, `too_long`, `invalid`, `invalid_option`, "
                                 "`unsupported_language`.")
