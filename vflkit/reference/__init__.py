"""The numbers printed in the five papers' tables (CSV, one long format; see README.md)."""
