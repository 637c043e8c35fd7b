# tests/bench/spec_prompts.sh — the prompts of the speculative-decoding
# benchmarks (sourced by spec_bench.sh and spec_vs_llama.sh): rewrite
# (a passage with a small edit), copy (repeat a passage), extract (records to JSON, free text), free (a
# story: little to copy); json / json_nojf are extract under $schema.
copy=$'Copy the following text exactly.\nText: The committee met on Tuesday to review the budget. The committee approved the budget for the new library, the new park and the road repairs. The committee will meet again next month to review the progress.\nCopy: '
extract=$'Record: name=Alice Smith; city=Paris; phone=555-0199; email=alice@example.com; role=engineer.\nRecord: name=Bob Jones; city=Berlin; phone=555-0142; email=bob@example.com; role=designer.\nWrite each record as JSON with the keys name, city, phone, email and role:\n'
free=$'Write a short story about a lighthouse keeper who finds a message in a bottle.\n'
json="$extract" json_nojf="$extract"
schema='{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"city":{"type":"string"},"phone":{"type":"string"},"email":{"type":"string"},"role":{"type":"string"}},"required":["name","city","phone","email","role"],"additionalProperties":false},"minItems":2,"maxItems":2}'
rewrite=$'Rewrite the following text with "Tuesday" changed to "Friday".\nText: The committee met on Tuesday to review the budget. The committee approved the budget for the new library, the new park and the road repairs. The committee will meet again next month to review the progress.\nRewritten text: '
