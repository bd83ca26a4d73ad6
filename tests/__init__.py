"""graphfix's tests, in folders that mirror the package's layers."""
