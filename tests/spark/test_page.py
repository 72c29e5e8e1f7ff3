"""The report page's template without Spark: every journal-supplied text is escaped."""

from __future__ import annotations

from priority_pubsub.analytics.journal.load import LineCounts
from priority_pubsub.analytics.render.page import PageData, render

HOSTILE = "<script>alert('x')</script>&"


def test_journal_text_is_escaped_and_markup_kept() -> None:
    counts = LineCounts(valid=1, malformed=1, samples={"malformed": [HOSTILE]})
    data = PageData(
        source=HOSTILE,
        generated_ms=0,
        target_wait_s=1.0,
        counts=counts,
        since=HOSTILE,
        reasons=[
            {
                "priority": 1,
                "queue": HOSTILE,
                "outcome": "dead",
                "reason": HOSTILE,
                "messages": 1234,
            }
        ],
        tables={"summary": HOSTILE},
    )
    html = render(data)
    assert "<script" not in html
    escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;"
    assert html.count(escaped) == 6  # source, since, queue, reason, sample, table path
    assert f"<pre>{escaped}</pre>" in html
    assert '<td class="l">dead</td>' in html  # the reasons table's text columns align left
    assert '<td class="">1,234</td>' in html
    assert "<svg" in html  # charts (Markup) are not escaped
    assert 'class="bad"' in html  # one malformed line
    assert html.startswith("<!DOCTYPE html>")
    assert html.endswith("</html>\n")
