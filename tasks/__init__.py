"""What a research run is made of: the contracts, memory, budget and ledger at the top; the four modules (modules/),
the Verifier's checks (checks/), the baselines, scoring and measuring (eval/) and Flow-GRPO (learn/). Imports infra/."""
