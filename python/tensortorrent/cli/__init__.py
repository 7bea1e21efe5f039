"""The tensortorrent command line."""
