"""Cost attribution: every dollar of the export lands in one `category.subcategory`.

Rules are data (`rules.BUILTIN_RULES`, plus `[attribution] rules` from config, which go first) and
are compiled into SQL CASE expressions (`compile.render_query`), so classification runs inside the
engine that aggregates the export, BigQuery or DuckDB alike.
"""

from monitor.attribution.compile import classify, compile_rules, query_params, render_query
from monitor.attribution.rules import BUILTIN_RULES, Rule

__all__ = ["BUILTIN_RULES", "Rule", "classify", "compile_rules", "query_params", "render_query"]
