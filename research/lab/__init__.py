"""Research reporting: the tables, intervals and figures of toy/ and research/, and the closed-form
surrogate the tests and notebooks check the kernel against."""
