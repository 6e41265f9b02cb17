"""Taskloom's wire schema: event vocabulary, frames, codecs, protocol messages, error codes.

Everything here is pure: no sockets, no asyncio, no SQLite. Every process imports it.
"""
