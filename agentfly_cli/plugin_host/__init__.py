"""The plugin host: hook specifications, entry-point loading with errors isolated, the component
registry, lookup by name.
"""
