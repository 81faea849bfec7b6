"""The history page: a clinician's own translations, newest first,
searchable and paginated; nobody else's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clinical.models import Translation
from clinical.translation.selectors import translation_search_for_user
from clinical.web.views import HISTORY_PAGE_SIZE
from tests.data import laymaker_sentences


def make_translation(user, text: str, *, output: str = "", minutes_ago: int = 0) -> Translation:
    row = Translation.objects.create(user=user, input_text=text, output_text=output or f"Plain: {text}",
                                     status=Translation.Status.COMPLETED)
    # created_at is auto_now_add: set the time afterwards to order rows.
    Translation.objects.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(minutes=minutes_ago))
    row.refresh_from_db()
    return row


@pytest.mark.django_db
def test_search_finds_the_clinicians_own_translations_by_input_or_output_text(clinician, other_clinician):
    sentences = laymaker_sentences()
    mine = make_translation(clinician, sentences[0], minutes_ago=2)
    by_output = make_translation(clinician, sentences[1], output="Your kidneys are working well.", minutes_ago=1)
    make_translation(clinician, sentences[2])
    theirs = make_translation(other_clinician, sentences[0])
    word = sentences[0].split()[0]

    found = list(translation_search_for_user(user=clinician, q=word.upper()))
    assert mine in found and theirs not in found
    assert list(translation_search_for_user(user=clinician, q="KIDNEYS ARE")) == [by_output]
    assert list(translation_search_for_user(user=clinician, q="  ")) == list(
        Translation.objects.filter(user=clinician).order_by("-created_at"))
    # LIKE wildcards in the query match literally.
    assert list(translation_search_for_user(user=clinician, q="%")) == []
    assert list(translation_search_for_user(user=clinician, q="_")) == []


@pytest.mark.django_db
def test_history_page_lists_newest_first_and_links_to_each_translation(client, clinician, other_clinician):
    sentences = laymaker_sentences()
    old = make_translation(clinician, sentences[3], minutes_ago=30)
    new = make_translation(clinician, sentences[4], minutes_ago=1)
    theirs = make_translation(other_clinician, sentences[5])
    client.force_login(clinician)

    response = client.get("/translations/")
    assert response.status_code == 200
    body = response.content.decode()
    assert body.index(f"/translations/{new.request_id}/") < body.index(f"/translations/{old.request_id}/")
    assert str(theirs.request_id) not in body
    assert "2 translations, newest first." in body


@pytest.mark.django_db
def test_history_search_and_pagination_keep_the_query(client, clinician):
    sentences = laymaker_sentences()
    for i in range(HISTORY_PAGE_SIZE + 5):
        make_translation(clinician, f"Pneumonia case {i}. {sentences[i]}", minutes_ago=i)
    make_translation(clinician, sentences[100])
    client.force_login(clinician)

    first = client.get("/translations/", {"q": "pneumonia"})
    assert first.context["page"].paginator.count == HISTORY_PAGE_SIZE + 5
    assert len(first.context["page"].object_list) == HISTORY_PAGE_SIZE
    assert "?q=pneumonia&amp;page=2" in first.content.decode()
    second = client.get("/translations/", {"q": "pneumonia", "page": 2})
    assert [t.input_text.split(".")[0] for t in second.context["page"].object_list] == [
        f"Pneumonia case {i}" for i in range(HISTORY_PAGE_SIZE, HISTORY_PAGE_SIZE + 5)]
    # Out-of-range or junk page numbers show a real page, not an error.
    assert client.get("/translations/", {"q": "pneumonia", "page": 99}).context["page"].number == 2
    assert client.get("/translations/", {"page": "x"}).context["page"].number == 1
    nothing = client.get("/translations/", {"q": "no such words anywhere"})
    assert nothing.status_code == 200 and "0 translations matching" in nothing.content.decode()


@pytest.mark.django_db
def test_history_needs_a_login(client):
    response = client.get("/translations/?q=x")
    assert response.status_code == 302 and response.url.startswith("/accounts/login/")


@pytest.mark.django_db
def test_detail_page_is_for_the_owner_only(client, clinician, other_clinician):
    row = make_translation(clinician, laymaker_sentences()[7])
    url = f"/translations/{row.request_id}/"
    anonymous = client.get(url)
    assert anonymous.status_code == 302 and anonymous.url.startswith("/accounts/login/")
    client.force_login(other_clinician)
    assert client.get(url).status_code == 404
    client.force_login(clinician)
    response = client.get(url)
    assert response.status_code == 200 and row.input_text in response.content.decode()
    assert f"/translations/{row.request_id}/handout/" in response.content.decode()
