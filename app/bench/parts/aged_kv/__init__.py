"""The aged-KV part: quality and bytes of caches whose older tokens are stored at lower
precision, with its measurements and its plot.
"""
