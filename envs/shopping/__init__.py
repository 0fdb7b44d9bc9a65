"""OneStopShop: the self-hosted shopping site (catalog, cart, checkout, orders, account)."""
