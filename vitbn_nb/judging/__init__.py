"""What every chapter's claims share: the one rule that judges a claim (``verdicts``), the claim type and the helpers
that judge one (``claims``), article 1's facts that several chapters read (``article1``), the seed plans' power
analysis (``power``), picking runs from a run table (``selection``), the checkpoint audit (``audit``)."""
