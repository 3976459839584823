"""proftab Parquet datasets: writing (`write`, `convert`), reading (`read`: the dataset reader of
`proftab.io.readers`, `query`), their layout (`layout`), atomic replacement (`atomic`), object
stores (`remote`) and Dask (`distributed`). Importing the package imports nothing else.
"""
