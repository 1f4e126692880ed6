"""Operations over many instances: tags, the filter language, bulk actions (docs/operations.md).

``language`` (the filter language and the tag rules) sits below the store, which renders a
filter to SQL; ``bulk`` (the client's side of bulk actions) and ``runner`` (the workers' side)
sit beside the client and the worker. This package imports nothing itself, so that each part
keeps its own layer.
"""
