"""The live call monitor (``streamscribe monitor``): web pages for supervisors and QA analysts.

The pure core: ``records`` (reading partials, finals, events and QA summaries), ``store`` (recent
calls in bounded memory) and ``health`` (the health strip from the workers' metrics). The I/O
shell: ``kafka`` (the reader thread), ``web`` (the aiohttp app, its JSON APIs and event stream)
and ``server`` (the process that wires them), imported by ``streamscribe monitor`` only.
"""

from pipeline.monitor.health import (
    HealthSnapshot,
    HealthTracker,
    WorkerScrape,
    histogram_quantile,
    parse_worker_metrics,
    parse_worker_urls,
)
from pipeline.monitor.records import (
    MonitorEvent,
    MonitorRecord,
    PartialUpdate,
    parse_event,
    parse_partial,
    parse_qa_call,
)
from pipeline.monitor.store import (
    CallDetail,
    CallPage,
    CallQuery,
    CallRow,
    ChannelView,
    Lane,
    MonitorStore,
    OpenUtterance,
    StoreChanges,
    StoreLimits,
    UtteranceView,
    lane_of,
)

__all__ = [
    "CallDetail",
    "CallPage",
    "CallQuery",
    "CallRow",
    "ChannelView",
    "HealthSnapshot",
    "HealthTracker",
    "Lane",
    "MonitorEvent",
    "MonitorRecord",
    "MonitorStore",
    "OpenUtterance",
    "PartialUpdate",
    "StoreChanges",
    "StoreLimits",
    "UtteranceView",
    "WorkerScrape",
    "histogram_quantile",
    "lane_of",
    "parse_event",
    "parse_partial",
    "parse_qa_call",
    "parse_worker_metrics",
    "parse_worker_urls",
]
