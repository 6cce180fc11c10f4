"""The chapters' layer: what each chapter says of its measurements (tables shaped for the page, the facts and words
its prose glues), one module per chapter or pair of chapters. The measurements themselves are below, in
:mod:`systems.bench` and :mod:`systems.profiling`, which return plain tables and know nothing of any chapter."""
