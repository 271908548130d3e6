"""The work behind the command line, without click: operations, output names, plans, one file.

``ops`` (what each command does to a picture), ``names`` (output file names),
``plan`` (inputs to tasks) and ``process`` (one task: read, compute, write).
"""
