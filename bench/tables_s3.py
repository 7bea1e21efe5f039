"""The README's S3 tables (the planner): optimality gap, planning time, Accelerate's
policy against the search, and predicted against measured time."""

from __future__ import annotations

from table_format import duration, machine_line, spread_s, table

TITLE = "S3: the planner"


def s3_measures(data: dict) -> str:
    gap, large, real = data["optimality"], data["large"], data["greedy_real_model"]
    planning = large["planning_s"]
    rows = [
        [
            f"(a) gap to the exhaustive optimum, {gap['instances']} small problems",
            f"median {gap['median_gap']:.2%}, worst {gap['worst_gap']:.2%}; {gap['within_1_percent']:.1%} within 1%",
            "within 1%",
        ],
        [
            f"(b) planning time, {large['regions']} regions on {large['devices']} devices",
            spread_s(planning["median"], planning["min"], planning["max"]),
            "under 1 s",
        ],
        [
            f"(c) Accelerate's policy / the search, same {large['regions']}-region graph (estimated latency)",
            f"{large['greedy_over_search']:.2f}x",
            "",
        ],
        [
            f"(c) Accelerate's fill / the plan, {real['regions']}-layer model on a declared machine (simulated)",
            f"{real['greedy_over_plan']:.2f}x",
            "",
        ],
    ]
    return table(["measure", "result", "target"], rows)


def s3_prediction(data: dict) -> tuple[str, str | None]:
    """(d) per model: predicted against measured; with the note that a declared
    device's agreement is by construction (its runtime waits out the prediction)."""
    rows, declared = [], False
    for name, row in data["prediction"].items():
        label = name
        if name.startswith("declared/"):
            declared = True
            label += " (see the note)"
        measured = spread_s(row["measured_median_s"], row["measured_min_s"], row["measured_max_s"])
        rows.append(
            [
                label,
                str(row["regions"]),
                duration(row["predicted_s"]),
                measured,
                f"{row['measured_over_predicted']:.3f}",
            ]
        )
    header = [
        "(d) model",
        "regions",
        "predicted",
        "measured: median (min-max)",
        "measured / predicted (target 0.85-1.15)",
    ]
    note = (
        "Note: on declared (virtual) devices the runtime waits out the predicted time itself, "
        "so agreement there is by construction, not evidence of the simulator's accuracy."
    )
    return table(header, rows), note if declared else None


def render_s3(data: dict) -> str:
    """The S3 tables: optimality gap, planning time, Accelerate's policy, predicted against measured."""
    prediction, note = s3_prediction(data)
    parts = [f"### {TITLE}", machine_line(data), s3_measures(data), prediction]
    return "\n\n".join(parts + ([note] if note else [])) + "\n"
