"""The rule and the claims: what the articles report, the one rule that judges a claim, each chapter's claims judged
by it, the checkpoint audit."""
