"""Figures in README.md's prose that derive from its generated tables (issue 29, item 8)."""

from ferrite_dev import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def lm_int8_costs() -> list:
    """int8 minus runtime f32 bits per byte, every row of the generated LM tables."""
    block = README.split("<!-- models:start -->", 1)[1].split("<!-- models:end -->", 1)[0]
    costs = []
    for table in block.split("\n\n"):
        rows = [line for line in table.splitlines() if line.startswith("|")]
        if not rows:
            continue
        head = [c.strip() for c in rows[0].strip("|").split("|")]
        if "runtime f32" not in head or "int8" not in head:
            continue
        f32, int8 = head.index("runtime f32"), head.index("int8")
        for row in rows[2:]:
            cells = [c.strip() for c in row.strip("|").split("|")]
            costs.append(float(cells[int8]) - float(cells[f32]))
    return costs


def test_the_int8_bits_per_byte_bound_is_the_tables_largest_cost():
    costs = lm_int8_costs()
    assert len(costs) >= 6, "the LM tables were not found"
    assert f"layout) at most 0.0044 and {max(costs):.4f}" in README


def test_the_integer_path_lm_costs_quoted_are_the_quantization_tables():
    table = (REPO_ROOT / "docs" / "quantization.md").read_text()
    costs = []
    for model in ("lm/small", "lm/large"):
        row = next(line for line in table.splitlines() if line.startswith(f"| `{model}` |"))
        tiled = row.strip("|").split("|")[3]  # the "int8 tiled" column: "2.2026 (+0.0033)"
        costs.append(tiled.split("(")[1].rstrip(") "))
    quoted = f"{costs[0]} / {costs[1]}"
    assert f"{quoted} bits per byte on the LMs" in README
    assert f"(these columns), {quoted} on the integer path" in (REPO_ROOT / "docs" / "models.md").read_text()
