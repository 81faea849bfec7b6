"""FHIR R4 in and out for the ``$plain-language`` operation.

Input: a ``Condition``, a ``DiagnosticReport`` or a ``Bundle`` of them,
validated with fhir.resources' R4B models (R4B shares R4's definitions of
these resources). The diagnosis text is taken, in order, from:

* Condition: ``code.text``, else the ``code.coding`` displays; then each
  ``note.text``;
* DiagnosticReport: ``conclusion``, else the ``conclusionCode`` texts or
  displays, else ``code.text``.

Output: a ``Parameters`` resource carrying the plain-language text, the
confidence and the verification state, labelled as AI-generated
(``meta.security`` ``AIAST`` from HL7's v3 ObservationValue code system)
with the model and precision; problems are an ``OperationOutcome``.
"""

from __future__ import annotations

from fhir.resources.R4B import get_fhir_model_class
from pydantic import ValidationError as PydanticValidationError

SUPPORTED = ("Condition", "DiagnosticReport")
AI_ASSERTED = {
    "system": "http://terminology.hl7.org/CodeSystem/v3-ObservationValue",
    "code": "AIAST",
    "display": "Artificial Intelligence asserted",
}


class FhirInputError(ValueError):
    """The body is not a usable FHIR resource; ``code`` is the FHIR
    IssueType (``structure``, ``invalid``, ``not-supported``, ``required``)."""

    def __init__(self, code: str, diagnostics: str) -> None:
        super().__init__(diagnostics)
        self.code, self.diagnostics = code, diagnostics


def _parse(data: object):
    if not isinstance(data, dict) or not isinstance(data.get("resourceType"), str):
        raise FhirInputError("structure", "The body must be a FHIR resource (a JSON object with resourceType).")
    kind = data["resourceType"]
    if kind not in (*SUPPORTED, "Bundle"):
        raise FhirInputError("not-supported", f"Expected Condition, DiagnosticReport or Bundle, not {kind}.")
    try:
        return get_fhir_model_class(kind).model_validate(data)
    except PydanticValidationError as exc:
        # Locations and messages only: pydantic's input echo could carry PHI.
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                             for e in exc.errors(include_input=False, include_url=False)[:10])
        raise FhirInputError("invalid", f"Invalid FHIR R4 {kind}: {problems}") from None
    except RecursionError:
        raise FhirInputError("too-costly", "The resource is nested too deeply to read.") from None


def _concept_text(concept) -> str:
    if concept is None:
        return ""
    if concept.text:
        return concept.text.strip()
    return "; ".join(c.display.strip() for c in (concept.coding or []) if c.display)


def _resource_text(resource) -> str:
    if resource.get_resource_type() == "Condition":
        parts = [_concept_text(resource.code)]
        parts += [note.text.strip() for note in (resource.note or []) if note.text]
    else:
        conclusion = (resource.conclusion or "").strip()
        codes = "; ".join(filter(None, (_concept_text(c) for c in (resource.conclusionCode or []))))
        parts = [conclusion or codes or _concept_text(resource.code)]
    return "\n".join(p for p in parts if p)


def diagnosis_text(data: object) -> tuple[str, list[str]]:
    """Validate a FHIR body and extract the diagnosis text.

    Returns:
        ``(text, references)``: the text (one line per resource or note)
        and ``"Type/id"`` references of the resources it came from.

    Raises:
        FhirInputError: not a FHIR resource, an unsupported type, invalid
            R4, or no diagnosis text in it.
    """
    resource = _parse(data)
    if resource.get_resource_type() == "Bundle":
        found = [e.resource for e in (resource.entry or [])
                 if e.resource is not None and e.resource.get_resource_type() in SUPPORTED]
    else:
        found = [resource]
    texts = [(_resource_text(r), r) for r in found]
    texts = [(t, r) for t, r in texts if t]
    if not texts:
        raise FhirInputError("required", "No Condition or DiagnosticReport with a diagnosis text "
                                         "(code.text, coding display, note or conclusion) was found.")
    refs = [f"{r.get_resource_type()}/{r.id}" for _, r in texts if r.id]
    return "\n".join(t for t, _ in texts), refs


def plain_language_parameters(*, api_view: dict, references: list[str]) -> dict:
    """The ``Parameters`` answer for a translation (``api_view`` is
    :func:`clinical.translation.selectors.translation_api_view`'s dict); validated
    against the R4B model before it is returned."""
    parameter = [
        {"name": "text", "valueString": api_view["text"] or ""},
        {"name": "verification", "valueCode": api_view["verification"].replace("_", "-")},
        {"name": "verified", "valueBoolean": api_view["verified"]},
        {"name": "model", "valueString": api_view["model"]},
        {"name": "precision", "valueString": api_view["precision"]},
        {"name": "translationId", "valueString": str(api_view["id"])},
    ]
    if api_view["confidence"] is not None:
        parameter.insert(1, {"name": "confidence", "valueDecimal": round(api_view["confidence"], 4)})
    parameter += [{"name": "source", "valueReference": {"reference": ref}} for ref in references]
    body = {"resourceType": "Parameters", "meta": {"security": [AI_ASSERTED]}, "parameter": parameter}
    get_fhir_model_class("Parameters").model_validate(body)
    return body


def operation_outcome(code: str, diagnostics: str, severity: str = "error") -> dict:
    """An ``OperationOutcome`` with one issue (FHIR IssueType ``code``);
    ``diagnostics`` cut as every API message is
    (:func:`clinical.api.errors.echo_truncate`)."""
    from clinical.api.errors import echo_truncate

    return {"resourceType": "OperationOutcome",
            "issue": [{"severity": severity, "code": code, "diagnostics": str(echo_truncate(diagnostics))}]}
