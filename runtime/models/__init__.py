"""runtime/models"""
