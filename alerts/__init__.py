"""Alert delivery: pipeline, durable outbox, Slack and console notifiers, digest rendering.

Public surface (import from the submodules; this package imports nothing heavy on its own):
- `alerts.pipeline`: `Deps`, `process(findings, now, deps)`, `deliver_outbox(deps, now)`,
  `flush_due(deps, now)` (groups whose `group_wait` / `group_interval` timer ended) and
  `outbox_tick(deps, now)` (flush, then deliver: the outbox job).
- `alerts.outbox`: `status(store) -> OutboxStatus` (pending / failed / last_error).
- `alerts.slack`: `SlackNotifier` (`check_channel` for `gpucost check`), `WebhookNotifier`;
  `alerts.channels`: channel name -> id resolution; `alerts.console`: `ConsoleNotifier`;
  `alerts.factory`: `make_notifier(config)`.
- `alerts.digest`: `DigestData`, `render_markdown`, `render_blocks`, `enqueue_digest`, `write_digest`;
  `alerts.charts`: `render_chart`.

`alerts` never imports `monitor.sources`: it consumes findings and aggregates, not billing rows.
"""
