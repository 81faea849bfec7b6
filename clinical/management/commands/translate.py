"""``manage.py translate "<diagnosis>"``: stream a translation to stdout."""

from __future__ import annotations

import asyncio
import sys
import time

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from clinical.models import Translation
from clinical.translation import admission, generation
from clinical.translation.engine import engine_get


class Command(BaseCommand):
    help = "Translate a diagnosis into plain language, streaming the output, then print the figures."

    def add_arguments(self, parser) -> None:
        parser.add_argument("text", help="the diagnosis text; '-' reads it from standard input")
        parser.add_argument("--max-tokens", type=int, default=None, help="output cap (tokens)")

    def handle(self, *args, text: str, max_tokens: int | None, **options) -> None:
        if text == "-":
            text = sys.stdin.read()
        row = asyncio.run(self.run(text, max_tokens))
        self.stdout.write("")
        if row.status != Translation.Status.COMPLETED:
            raise CommandError(f"translation {row.request_id} ended {row.status} ({row.error_class})")
        confidence = "n/a" if row.confidence is None else f"{row.confidence:.3f}"
        rate = "n/a" if row.tokens_per_s is None else f"{row.tokens_per_s:.1f}"
        self.stdout.write(
            f"\nrequest {row.request_id} · {row.engine} {row.model_name} {row.precision}\n"
            f"time to first token: {row.ttft_ms:.0f} ms · total: {row.total_ms:.0f} ms · "
            f"queue wait: {row.queue_wait_ms:.0f} ms\n"
            f"tokens: {row.tokens_in} in, {row.tokens_out} out ({rate} tokens/s) · "
            f"confidence: {confidence}"
        )

    async def run(self, text: str, max_tokens: int | None) -> Translation:
        from channels.db import database_sync_to_async

        started = time.perf_counter()
        engine = await engine_get()
        self.stderr.write(f"engine {engine.info.engine} ready in {(time.perf_counter() - started) * 1000:.0f} ms")
        try:
            row = await database_sync_to_async(admission.translation_create)(
                user=None, text=text, source=Translation.Source.CLI, engine_info=engine.info)
        except ValidationError as exc:
            raise CommandError(exc.messages[0]) from exc

        async def write(piece: str) -> None:
            self.stdout.write(piece, ending="")
            self.stdout.flush()

        try:
            return await generation.translation_generate(
                translation=row, engine=engine, on_token=write,
                received_ns=time.monotonic_ns(), max_tokens=max_tokens)
        finally:
            await engine.shutdown()
