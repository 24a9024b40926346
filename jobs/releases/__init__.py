"""What follows a completed lineage: its model registered, and promoted when its schedule says so."""
