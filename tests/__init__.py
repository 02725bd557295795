"""The test suite: a package, so its modules and helpers have names of their own (``tests.conftest``,
``tests.support.polling``) that no other folder's ``conftest`` or module of the same name can shadow."""
