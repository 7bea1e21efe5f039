"""Files the runtime keeps on disk: the weights cache."""
