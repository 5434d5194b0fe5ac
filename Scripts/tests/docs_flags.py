#!/usr/bin/env python3
"""Checks the docs under ROOT (README.md, docs/, Deploy/) against `parley-node run --help` (a file): see docs-flags.sh."""
import pathlib, re, sys
root, help_text = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]).read_text()
help_flat = " ".join(help_text.split())
# An inverted flag is listed as `--name/--no-name`: both are options.
help_flags = {flag for pair in re.findall(r"(?m)^\s+(--[a-z][a-z0-9-]*)(?:/(--[a-z][a-z0-9-]*))?", help_text) for flag in pair if flag} - {"--help"}
docs = [root / "README.md"] + sorted((root / "docs").glob("*.md")) + sorted(p for p in (root / "Deploy").rglob("*") if p.is_file())
config = (root / "docs" / "OPERATIONS.md").read_text()
clients = config.split("### Clients and scripts", 1)[1].split("\n## ", 1)[0]
client_vars = set(re.findall(r"PARLEY_[A-Z0-9_]+", clients))
problems, flags_seen, vars_seen = [], set(), set()
for path in docs:
    text = path.read_text()
    for var in set(re.findall(r"PARLEY_[A-Z0-9_]+", text)):
        vars_seen.add(var)
        if var not in help_flat and var not in client_vars:
            problems.append(f"{path.relative_to(root)}: {var} is neither a parley-node run variable nor listed under 'Clients and scripts' in docs/OPERATIONS.md")
    for line in text.splitlines():
        node_run = ("parley-node" in line or "$B run" in line) and re.search(r"\brun\b", line)
        table_row = re.match(r"\|\s*`--", line)
        if not (node_run or table_row):
            continue
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line):
            if flag in ("--dir", "--dns", "--ip", "--common-name", "--client") and "certs" in line:
                continue
            if flag == "--help":
                continue
            flags_seen.add(flag)
            if flag not in help_flags:
                problems.append(f"{path.relative_to(root)}: {flag} is not an option of parley-node run: {line.strip()[:100]}")
for flag in sorted(help_flags):
    if f"`{flag}`" not in config and f"`{flag.replace('--no-', '--', 1)}`" not in config:
        problems.append(f"docs/OPERATIONS.md does not document {flag}")
print(f"checked {len(flags_seen)} flags and {len(vars_seen)} variables in {len(docs)} files against {len(help_flags)} options")
for problem in problems:
    print("PROBLEM " + problem)
